import {
  type Database,
  updateWebhookEndpointOrdering,
  type WebhookEndpoint,
  type WebhookEndpointOrdering,
} from '@herald/db';
import { type Kysely, sql } from 'kysely';

/*
 * An endpoint's ordering changed by hand (GraphQL `updateWebhookEndpoint`), and what that does to the
 * deliveries waiting in its line (lease-protocol.ts, "FIFO endpoints").
 */

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
  const endpoint = await updateWebhookEndpointOrdering(db, input);
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
 * `limit` per statement: the statement, to be run in the caller's transaction (retention.ts runs it
 * under its lock). One index probe per unordered endpoint; run it from a periodic pass, not a
 * request. It returns the ids made due.
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
