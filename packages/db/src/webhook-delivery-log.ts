import { WEBHOOK_TEST_EVENT } from '@herald/contracts';
import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import type { WebhookDelivery, WebhookDeliveryStatus } from './webhook-tables.js';

/*
 * The tenant's view of deliveries: the searchable delivery log of an endpoint and its pending test
 * events. Replaying dead letters and sending a `webhook.test` event change deliveries: they are the
 * webhook engine's (lease-protocol.ts).
 */

export interface DeliveryLogQuery {
  endpointId: string;
  status?: WebhookDeliveryStatus | null | undefined;
  eventType?: string | null | undefined;
  eventId?: string | null | undefined;
  /** Only deliveries created at or after this instant. */
  createdAfter?: Date | null | undefined;
  /** Only deliveries created before this instant. */
  createdBefore?: Date | null | undefined;
  /** Only deliveries older than this `seq` (the `after` cursor). */
  afterSeq?: string | null | undefined;
  /** Only deliveries newer than this `seq` (the `before` cursor). */
  beforeSeq?: string | null | undefined;
  limit: number;
  /** Walk from the oldest end (for `last`); the caller reverses the rows. */
  inverted?: boolean;
}

/**
 * One page of an endpoint's delivery log, newest first (keyset pagination on `seq`, served by the
 * `(endpoint_id, seq desc)` index), filtered by status, event type, event id and creation time.
 */
export async function listWebhookDeliveryLog(
  db: Kysely<Database>,
  query: DeliveryLogQuery,
): Promise<WebhookDelivery[]> {
  let select = db.selectFrom('webhook_deliveries').selectAll().where('endpoint_id', '=', query.endpointId);
  if (query.status) select = select.where('status', '=', query.status);
  if (query.eventType) select = select.where('event_type', '=', query.eventType);
  if (query.eventId) select = select.where('event_id', '=', query.eventId);
  if (query.createdAfter) select = select.where('created_at', '>=', query.createdAfter);
  if (query.createdBefore) select = select.where('created_at', '<', query.createdBefore);
  if (query.afterSeq != null) select = select.where('seq', '<', query.afterSeq);
  if (query.beforeSeq != null) select = select.where('seq', '>', query.beforeSeq);
  return select
    .orderBy('seq', query.inverted ? 'asc' : 'desc')
    .limit(query.limit)
    .execute();
}

/** How many `webhook.test` deliveries of an endpoint are still PENDING (sent or retrying). */
export async function countPendingTestWebhooks(db: Kysely<Database>, endpointId: string): Promise<number> {
  const row = await db
    .selectFrom('webhook_deliveries')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('endpoint_id', '=', endpointId)
    .where('event_type', '=', WEBHOOK_TEST_EVENT)
    .where('status', '=', 'PENDING')
    .executeTakeFirstOrThrow();
  return Number(row.count);
}
