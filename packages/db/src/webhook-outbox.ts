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
 * A FROM item (use it `cross join lateral`) that takes the organisation's ordering lock when it has an
 * ordered (FIFO) endpoint, and yields one row either way. The events of such an organisation must be
 * numbered in the order they commit, since a FIFO endpoint gets them in `seq` order: an insert that
 * draws its `seq` behind this item, in a transaction that commits next, holds the lock (a transaction-
 * scoped advisory lock) from before its number is drawn until its commit is visible, so a later
 * number is never visible first. Organisations without a FIFO endpoint take nothing: one probe of
 * `webhook_endpoints_org_fifo_idx`, and their writers never wait for each other.
 * @param orgIdExpression SQL for the organisation's id, e.g. a column of the row being inserted
 */
export function orgOrderLock(orgIdExpression: string): string {
  return `(select count(pg_advisory_xact_lock(${orgOrderLockKey('fifo.org_id')})) as locked
    from (select f.org_id from webhook_endpoints f
      where f.org_id = ${orgIdExpression} and f.ordering = 'FIFO' and f.deleted_at is null limit 1) fifo)`;
}

/**
 * The advisory lock key of {@link orgOrderLock} (a bigint SQL expression), for a statement that takes
 * several organisations' locks: take them in the order of their keys, so that two such statements
 * never wait for each other.
 */
export function orgOrderLockKey(orgIdExpression: string): string {
  return `hashtextextended(current_schema() || ':herald-org-order:' || ${orgIdExpression}, 0)`;
}

/**
 * {@link orgOrderLock} as a statement of its own, for a transaction that records an event of `orgId`
 * next: a no-op for an organisation without a FIFO endpoint.
 */
export async function takeOrgOrderLock(db: Kysely<Database>, orgId: string): Promise<void> {
  await sql`select ordered.locked from (select ${orgId}::text as org_id) event
    cross join lateral ${sql.raw(orgOrderLock('event.org_id'))} ordered`.execute(db);
}

/**
 * Records an event in the outbox. Call it with the transaction that makes the change the event
 * announces: the event exists exactly when the change committed, so no event is lost. For an
 * organisation with a FIFO endpoint it first takes the organisation's ordering lock ({@link orgOrderLock}),
 * held to the commit: record it after the transaction's row locks, and record one organisation's events
 * per transaction (two transactions that took two organisations' locks in opposite orders would deadlock).
 * @throws InvalidWebhookEventError when the body does not match its type's schema in the event
 *   catalog; thrown before any statement, so the transaction is still usable without the event
 */
export async function insertOutboxEvent(db: Kysely<Database>, event: NewOutboxEvent): Promise<void> {
  assertValidWebhookEvent(event);
  // In commit order for an organisation with a FIFO endpoint: held from here to the commit.
  await takeOrgOrderLock(db, event.orgId);
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
