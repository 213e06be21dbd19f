import { randomUUID } from 'node:crypto';
import { WEBHOOK_EVENT_ID_PREFIX } from '@herald/contracts';
import { type Kysely, sql } from 'kysely';
import type { Database } from './database.js';
import type { WebhookOutboxEvent } from './webhook-tables.js';

/** A fresh event id, `evt_` and 32 hex digits. */
export function newWebhookEventId(): string {
  return `${WEBHOOK_EVENT_ID_PREFIX}${randomUUID().replaceAll('-', '')}`;
}

export interface NewOutboxEvent {
  /** `evt_…`, the same id as in `body`. */
  id: string;
  orgId: string;
  type: string;
  /** The JSON body, exactly as it will be signed and sent. */
  body: string;
  createdAt?: Date;
}

/**
 * Records an event in the outbox. Call it with the transaction that makes the change the event
 * announces: the event exists exactly when the change committed (SPEC §7, "no event is lost").
 */
export async function insertOutboxEvent(db: Kysely<Database>, event: NewOutboxEvent): Promise<void> {
  await db
    .insertInto('webhook_outbox')
    .values({ id: event.id, org_id: event.orgId, type: event.type, body: event.body, created_at: event.createdAt })
    .execute();
}

export async function findOutboxEvent(db: Kysely<Database>, id: string): Promise<WebhookOutboxEvent | undefined> {
  return db.selectFrom('webhook_outbox').selectAll().where('id', '=', id).executeTakeFirst();
}

export interface RelayClaim {
  /** At most this many events. */
  limit: number;
  /** An event handed to the queue this long ago and still not dispatched is handed over again. */
  resendAfterMs: number;
}

/**
 * Claims the next events the relay should put in the queue: never relayed, or relayed so long ago that
 * the queue must have lost them. Marks them relayed now. Relays running at the same time claim
 * disjoint sets (`skip locked`).
 * @returns the event ids, oldest first
 */
export async function claimOutboxForRelay(db: Kysely<Database>, claim: RelayClaim): Promise<string[]> {
  const { rows } = await sql<{ id: string; seq: string }>`
    update webhook_outbox set relayed_at = now()
    where id in (
      select id from webhook_outbox
      where dispatched_at is null
        and (relayed_at is null or relayed_at < now() - ${claim.resendAfterMs}::double precision * interval '1 millisecond')
      order by seq
      limit ${claim.limit}
      for update skip locked
    )
    returning id, seq
  `.execute(db);
  return rows.sort((a, b) => Number(BigInt(a.seq) - BigInt(b.seq))).map((row) => row.id);
}

/**
 * Forgets that undispatched events were relayed, so the relay sends them again at once. Called when
 * the queue lost its entries (Redis restarted without persistence).
 * @returns how many events will be sent again
 */
export async function resetOutboxRelay(db: Kysely<Database>): Promise<number> {
  const result = await db
    .updateTable('webhook_outbox')
    .set({ relayed_at: null })
    .where('dispatched_at', 'is', null)
    .where('relayed_at', 'is not', null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}
