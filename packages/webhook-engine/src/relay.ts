import { claimOutboxForRelay, type Database, resetOutboxRelay } from '@herald/db';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { createPollLoop, type PollLoop } from './poll-loop.js';
import type { WebhookQueue } from './queue/webhook-queue.js';

export interface RelayOptions {
  db: Kysely<Database>;
  queue: WebhookQueue;
  logger: Logger;
  /** Events moved per pass. */
  batchSize: number;
  /** How often the outbox is looked at when idle. */
  pollIntervalMs: number;
  /** An event relayed this long ago and still not dispatched is relayed again (the queue lost it). */
  resendAfterMs: number;
}

export interface Relay extends Pick<PollLoop, 'start' | 'stop' | 'wake' | 'healthy'> {
  /** Hands every undispatched event to the queue again, now (the queue lost its entries). */
  resend(): Promise<void>;
}

/**
 * Moves outbox events into the queue. A pass claims the oldest events not yet relayed (or relayed too
 * long ago without being dispatched: the queue lost them), marks them relayed and appends one `event`
 * entry each. The event counts as done only when a dispatcher has created its deliveries
 * (`dispatched_at`), so a crash anywhere in between leads at worst to the same event id in the queue
 * twice, and the fan-out is idempotent (one delivery per event and endpoint).
 */
export function createRelay(options: RelayOptions): Relay {
  const { db, queue, logger, batchSize } = options;
  const loop = createPollLoop(
    'relay',
    async () => {
      const ids = await claimOutboxForRelay(db, { limit: batchSize, resendAfterMs: options.resendAfterMs });
      if (ids.length === 0) return false;
      try {
        await queue.enqueue(ids.map((eventId) => ({ kind: 'event', eventId })));
      } catch (error) {
        // Not in the queue: let the next pass take them again rather than wait for `resendAfterMs`.
        await db
          .updateTable('webhook_outbox')
          .set({ relayed_at: null })
          .where('id', 'in', ids)
          .where('dispatched_at', 'is', null)
          .execute()
          .catch(() => {});
        throw error;
      }
      logger.debug({ events: ids.length }, 'relayed outbox events');
      return ids.length === batchSize;
    },
    { intervalMs: options.pollIntervalMs, logger },
  );
  return {
    start: loop.start,
    stop: loop.stop,
    wake: loop.wake,
    get healthy() {
      return loop.healthy;
    },
    async resend() {
      const count = await resetOutboxRelay(db);
      if (count > 0) logger.warn({ events: count }, 'queue was reset: relaying undispatched events again');
      loop.wake();
    },
  };
}
