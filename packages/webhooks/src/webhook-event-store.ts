import type { WebhookEvent } from './webhook-event.js';

/**
 * Where a receiver persists the events it accepts, keyed by event id. The receiver helper calls
 * {@link WebhookEventStore.recordIfNew} before it answers, so a 2xx always means "stored durably", and a
 * duplicate delivery is recognised however many times it arrives.
 */
export interface WebhookEventStore {
  /**
   * Stores the event unless one with the same id is already stored; durable once the promise resolves.
   * Concurrent calls with the same id must resolve `true` for at most one of them.
   * @returns `true` when the event was stored now, `false` when its id was already there.
   * A rejection makes the receiver helper answer 500, so the sender retries later.
   */
  recordIfNew(event: WebhookEvent): Promise<boolean>;
}
