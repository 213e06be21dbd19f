import { newDeliveryId, newEventId, WEBHOOK_TEST_EVENT } from '@herald/contracts';
import { type Kysely, sql } from 'kysely';
import type { Database } from './database.js';
import { assertValidWebhookEvent } from './webhook-event-check.js';
import { replayedLinePlace } from './webhook-fifo.js';
import type { WebhookDelivery, WebhookDeliveryStatus, WebhookEndpoint } from './webhook-tables.js';

/*
 * The tenant's tools on deliveries: the searchable delivery log of an endpoint, replaying
 * all of its dead letters at once, and the `webhook.test` event.
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

/**
 * Makes every DEAD delivery of an endpoint due again now with a fresh retry horizon, in one statement
 * (any number of them); their attempt history stays. Same effect per delivery as
 * `replayWebhookDelivery`: the lease is cleared, so an attempt still in flight cannot overwrite the
 * replay, and the delivery may be streamed as a dead letter again if it dies again.
 * @returns how many deliveries were replayed
 */
export async function replayDeadWebhookDeliveries(db: Kysely<Database>, endpointId: string): Promise<number> {
  const result = await db
    .updateTable('webhook_deliveries')
    .set({
      status: 'PENDING',
      next_attempt_at: replayedLinePlace().nextAttemptAt,
      fifo_seq: replayedLinePlace().fifoSeq,
      horizon_from: sql<Date>`now()`,
      updated_at: sql<Date>`now()`,
      lease_token: null,
      leased_until: null,
      dead_letter_streamed_at: null,
    })
    .where('endpoint_id', '=', endpointId)
    .where('status', '=', 'DEAD')
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/**
 * Records a `webhook.test` event for one endpoint (outbox `target_endpoint_id`) and its delivery, in
 * one transaction, so the delivery can be returned and queried at once; the engine's fan-out finds it
 * already there (deliveries are unique per event and endpoint). The delivery is due now, or SKIPPED
 * (never sent) when the endpoint is disabled. Body data: `{ endpointId, message }`.
 * @throws InvalidWebhookEventError when the body does not match the catalog (nothing is recorded)
 */
export async function insertTestWebhook(db: Kysely<Database>, endpoint: WebhookEndpoint): Promise<WebhookDelivery> {
  return db.transaction().execute(async (trx) => {
    const created = new Date();
    const eventId = newEventId();
    const body = JSON.stringify({
      id: eventId,
      type: WEBHOOK_TEST_EVENT,
      created: created.toISOString(),
      data: { endpointId: endpoint.id, message: 'A test event sent from Herald: your receiver is reachable.' },
    });
    assertValidWebhookEvent({ id: eventId, type: WEBHOOK_TEST_EVENT, body });
    await trx
      .insertInto('webhook_outbox')
      .values({
        id: eventId,
        org_id: endpoint.org_id,
        type: WEBHOOK_TEST_EVENT,
        body,
        created_at: created,
        target_endpoint_id: endpoint.id,
      })
      .execute();
    const current = await trx
      .selectFrom('webhook_endpoints')
      .select(['status', 'deleted_at'])
      .where('id', '=', endpoint.id)
      .forShare()
      .executeTakeFirst();
    const skipped = current?.status !== 'ENABLED' || current.deleted_at !== null;
    return trx
      .insertInto('webhook_deliveries')
      .values({
        id: newDeliveryId(),
        event_id: eventId,
        endpoint_id: endpoint.id,
        org_id: endpoint.org_id,
        event_type: WEBHOOK_TEST_EVENT,
        status: skipped ? 'SKIPPED' : 'PENDING',
        next_attempt_at: skipped ? null : sql<Date>`now()`,
        lease_token: null,
        leased_until: null,
      })
      .returningAll()
      .executeTakeFirstOrThrow();
  });
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
