import { OUTBOX_NOTIFY_CHANNEL } from '@herald/contracts';
import { type Kysely, sql } from 'kysely';
import type { Database } from './database.js';
import { assertValidWebhookEvent } from './webhook-event-check.js';

export interface NewOutboxEvent {
  /** `evt_…`, the same id as in `body`. */
  id: string;
  orgId: string;
  type: string;
  /** The JSON body, exactly as it will be signed and sent. */
  body: string;
  createdAt?: Date;
  /** Deliver to this endpoint only (`webhook.test`), whatever its event types. */
  targetEndpointId?: string;
  /** Never deliver to this endpoint (an operational event about it). */
  excludeEndpointId?: string;
}

/**
 * Records an event in the outbox. Call it with the transaction that makes the change the event
 * announces: the event exists exactly when the change committed, so no event is lost.
 * @throws InvalidWebhookEventError when the body does not match its type's schema in the event
 *   catalog; thrown before any statement, so the transaction is still usable without the event
 */
export async function insertOutboxEvent(db: Kysely<Database>, event: NewOutboxEvent): Promise<void> {
  assertValidWebhookEvent(event);
  await db
    .insertInto('webhook_outbox')
    .values({
      id: event.id,
      org_id: event.orgId,
      type: event.type,
      body: event.body,
      created_at: event.createdAt,
      target_endpoint_id: event.targetEndpointId ?? null,
      exclude_endpoint_id: event.excludeEndpointId ?? null,
    })
    .execute();
  // Delivered at commit (never for a rolled-back event): dispatchers fan it out at once.
  await sql`select pg_notify(${OUTBOX_NOTIFY_CHANNEL}, current_schema())`.execute(db);
}
