import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import type { WebhookDelivery, WebhookDeliveryStatus } from './webhook-tables.js';

/*
 * Deliveries as the API reads them. The database is the source of truth for every delivery's state;
 * every statement that changes one (fan-out, claim, record, replay, test send, ...) lives with its
 * lease protocol in @herald/webhook-engine (lease-protocol.ts).
 */

export async function findWebhookDeliveryById(db: Kysely<Database>, id: string): Promise<WebhookDelivery | undefined> {
  return db.selectFrom('webhook_deliveries').selectAll().where('id', '=', id).executeTakeFirst();
}

export interface DeliveryPageQuery {
  endpointId: string;
  status?: WebhookDeliveryStatus | null | undefined;
  /** Only deliveries older than this `seq` (the `after` cursor). */
  afterSeq?: string | null | undefined;
  /** Only deliveries newer than this `seq` (the `before` cursor). */
  beforeSeq?: string | null | undefined;
  limit: number;
  /** Walk from the oldest end (for `last`); the caller reverses the rows. */
  inverted?: boolean;
}

/** One page of an endpoint's deliveries, newest first (keyset pagination on `seq`). */
export async function listWebhookDeliveries(
  db: Kysely<Database>,
  query: DeliveryPageQuery,
): Promise<WebhookDelivery[]> {
  let select = db.selectFrom('webhook_deliveries').selectAll().where('endpoint_id', '=', query.endpointId);
  if (query.status) select = select.where('status', '=', query.status);
  if (query.afterSeq != null) select = select.where('seq', '<', query.afterSeq);
  if (query.beforeSeq != null) select = select.where('seq', '>', query.beforeSeq);
  return select
    .orderBy('seq', query.inverted ? 'asc' : 'desc')
    .limit(query.limit)
    .execute();
}

/** Deliveries waiting for a retry (pending after at least one failed attempt). */
export async function countRetryBacklog(db: Kysely<Database>): Promise<number> {
  const row = await db
    .selectFrom('webhook_deliveries')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('status', '=', 'PENDING')
    .where('attempt_count', '>', 0)
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

/** A DEAD delivery, as the embedded queue lists its dead letters. */
export interface DeadDelivery {
  id: string;
  eventId: string;
  eventType: string;
  orgId: string;
  endpointId: string;
  url: string;
  attemptCount: number;
  lastError: string | null;
  lastStatusCode: number | null;
  updatedAt: Date;
}

/** DEAD deliveries, most recent first. */
export async function listDeadWebhookDeliveries(db: Kysely<Database>, limit: number): Promise<DeadDelivery[]> {
  const rows = await db
    .selectFrom('webhook_deliveries as delivery')
    .innerJoin('webhook_endpoints as endpoint', 'endpoint.id', 'delivery.endpoint_id')
    .leftJoinLateral(
      (eb) =>
        eb
          .selectFrom('webhook_attempts')
          .select(['error', 'status_code'])
          .whereRef('webhook_attempts.delivery_id', '=', 'delivery.id')
          .orderBy('webhook_attempts.id', 'desc')
          .limit(1)
          .as('last'),
      (join) => join.onTrue(),
    )
    .select([
      'delivery.id',
      'delivery.event_id',
      'delivery.event_type',
      'delivery.org_id',
      'delivery.endpoint_id',
      'delivery.attempt_count',
      'delivery.updated_at',
      'endpoint.url',
      'last.error',
      'last.status_code',
    ])
    .where('delivery.status', '=', 'DEAD')
    .orderBy('delivery.updated_at', 'desc')
    .limit(limit)
    .execute();
  return rows.map((row) => ({
    id: row.id,
    eventId: row.event_id,
    eventType: row.event_type,
    orgId: row.org_id,
    endpointId: row.endpoint_id,
    url: row.url,
    attemptCount: row.attempt_count,
    lastError: row.error ?? null,
    lastStatusCode: row.status_code ?? null,
    updatedAt: row.updated_at,
  }));
}
