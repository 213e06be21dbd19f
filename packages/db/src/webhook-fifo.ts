import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import type { WebhookDelivery, WebhookEndpoint, WebhookEndpointOrdering } from './webhook-tables.js';

/*
 * FIFO endpoints, as the API reads them (every change to a delivery, and why a line works as it does,
 * is in the webhook engine's lease-protocol.ts, "FIFO endpoints"). A FIFO endpoint's pending
 * deliveries form a line ordered by `fifo_seq`; only the head is ever attempted, and the others wait
 * with no `next_attempt_at` (the due scan does not see them).
 */

/**
 * Sets an endpoint's `ordering`: its row only. What the change does to the deliveries waiting in its
 * line is the webhook engine's (lease-protocol.ts, `setWebhookEndpointOrdering`), which calls this.
 * @param orgIds the organisations the caller may act on; an endpoint outside them is treated as absent
 * @returns the endpoint, or undefined when it does not exist (or is deleted, or outside `orgIds`)
 */
export async function updateWebhookEndpointOrdering(
  db: Kysely<Database>,
  input: { id: string; orgIds: readonly string[]; ordering: WebhookEndpointOrdering },
): Promise<WebhookEndpoint | undefined> {
  if (input.orgIds.length === 0) return undefined;
  return db
    .updateTable('webhook_endpoints')
    .set({ ordering: input.ordering })
    .where('id', '=', input.id)
    .where('org_id', 'in', [...input.orgIds])
    .where('deleted_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
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
