import { type Kysely, sql } from 'kysely';
import type { Database } from './database.js';
import type { WebhookDelivery, WebhookEndpoint, WebhookEndpointOrdering } from './webhook-tables.js';

/*
 * FIFO endpoints, as the API and the replay paths see them (the engine's side, and why a line works as
 * it does, is in the webhook engine's lease-protocol.ts, "FIFO endpoints"). A FIFO endpoint's pending
 * deliveries form a line ordered by `fifo_seq`; only the head is ever attempted, and the others wait
 * with no `next_attempt_at` (the due scan does not see them).
 */

/**
 * The `set` values a replay gives a delivery so that it goes to the back of its endpoint's line when
 * the endpoint is FIFO (a fresh place from the outbox sequence, waiting: no `next_attempt_at`), and is
 * due now otherwise.
 * @param row how the updated `webhook_deliveries` row is named in the statement
 */
export function replayedLinePlace(row = 'webhook_deliveries') {
  const fifo = sql`exists (select 1 from webhook_endpoints fifo_endpoint
    where fifo_endpoint.id = ${sql.ref(`${row}.endpoint_id`)} and fifo_endpoint.ordering = 'FIFO')`;
  return {
    nextAttemptAt: sql<Date | null>`case when ${fifo} then null else now() end`,
    fifoSeq: sql<string | null>`case when ${fifo} then nextval(pg_get_serial_sequence('webhook_outbox', 'seq')) end`,
  };
}

/**
 * Sets an endpoint's ordering. Turning FIFO off lets its line go: deliveries waiting in it become due
 * now, as any unordered endpoint's. Turning it on orders the deliveries made from then on; those
 * already pending keep no order among themselves (they are still sent one at a time).
 *
 * The endpoint's row and its deliveries are changed in two statements, each its own transaction: a
 * dispatcher recording an attempt locks the delivery and then the endpoint (its health), so one
 * transaction locking the endpoint and then the deliveries could deadlock with it. A delivery that
 * still waits in the line of an endpoint no longer FIFO (this process stopped between the two, or a
 * fan-out that read the old ordering committed after the release) is made due by the retention
 * pass ({@link releaseWebhookFifoLines}).
 * @param orgIds the organisations the caller may act on; an endpoint outside them is treated as absent
 * @returns the endpoint, or undefined when it does not exist (or is deleted, or outside `orgIds`)
 */
export async function setWebhookEndpointOrdering(
  db: Kysely<Database>,
  input: { id: string; orgIds: readonly string[]; ordering: WebhookEndpointOrdering },
): Promise<WebhookEndpoint | undefined> {
  if (input.orgIds.length === 0) return undefined;
  const endpoint = await db
    .updateTable('webhook_endpoints')
    .set({ ordering: input.ordering })
    .where('id', '=', input.id)
    .where('org_id', 'in', [...input.orgIds])
    .where('deleted_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
  if (endpoint && input.ordering === 'UNORDERED') {
    await db
      .updateTable('webhook_deliveries')
      .set({ next_attempt_at: sql<Date>`now()` })
      .where('endpoint_id', '=', endpoint.id)
      .where('status', '=', 'PENDING')
      .where('next_attempt_at', 'is', null)
      .execute();
  }
  return endpoint;
}

/**
 * Makes due the deliveries still waiting in the line of an endpoint that is no longer FIFO, at most
 * `limit` per statement: the statement, to be run in the caller's transaction. One index probe per
 * unordered endpoint; run it from a periodic pass, not a request. It returns the ids made due.
 */
export function releaseWebhookFifoLines(limit: number) {
  return sql<{ id: string }>`
    update webhook_deliveries delivery set next_attempt_at = now()
    where delivery.id in (
      select waiting.id from webhook_endpoints endpoint
      cross join lateral (
        select id from webhook_deliveries
        where endpoint_id = endpoint.id and status = 'PENDING' and fifo_seq is not null
          and next_attempt_at is null
        limit ${limit}
      ) waiting
      where endpoint.ordering <> 'FIFO'
      limit ${limit}
    ) and delivery.status = 'PENDING' and delivery.next_attempt_at is null
    returning delivery.id`;
}

/** The head of a FIFO endpoint's line and how many deliveries wait behind it. */
export interface WebhookFifoHead {
  delivery: WebhookDelivery;
  /** Pending deliveries of the endpoint behind the head. */
  heldBack: number;
}

/** The head of an endpoint's line (its earliest pending FIFO delivery), or undefined when the line is empty. */
export async function findWebhookFifoHead(
  db: Kysely<Database>,
  endpointId: string,
): Promise<WebhookFifoHead | undefined> {
  const head = await db
    .selectFrom('webhook_deliveries')
    .selectAll()
    .where('endpoint_id', '=', endpointId)
    .where('status', '=', 'PENDING')
    .where('fifo_seq', 'is not', null)
    .orderBy('fifo_seq')
    .limit(1)
    .executeTakeFirst();
  if (!head) return undefined;
  const row = await db
    .selectFrom('webhook_deliveries')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('endpoint_id', '=', endpointId)
    .where('status', '=', 'PENDING')
    .where('id', '<>', head.id)
    .executeTakeFirstOrThrow();
  return { delivery: head, heldBack: Number(row.count) };
}
