import { type Kysely, sql } from 'kysely';
import type { Database } from './database.js';

/*
 * Embedded mode's work queue (no Redis): a table read with `for update skip locked`. An entry is
 * claimed by setting `claimed_at`, acknowledged by deleting it, and claimed again by anyone once it has
 * been claimed longer than the caller's idle limit: the semantics of a Redis consumer group's
 * pending-entries list and XAUTOCLAIM.
 */

export interface QueuedWork {
  id: string;
  message: unknown;
}

export async function enqueueWebhookWork(db: Kysely<Database>, messages: readonly unknown[]): Promise<void> {
  if (messages.length === 0) return;
  await db
    .insertInto('webhook_queue')
    .values(messages.map((message) => ({ message: JSON.stringify(message) })))
    .execute();
}

/**
 * Claims up to `limit` entries, oldest first: unclaimed ones, or with `minIdleMs`, ones claimed longer
 * ago than that (their consumer is presumed dead).
 */
export async function claimWebhookWork(
  db: Kysely<Database>,
  options: { limit: number; minIdleMs?: number },
): Promise<QueuedWork[]> {
  const claimable =
    options.minIdleMs === undefined
      ? sql`claimed_at is null`
      : sql`claimed_at < now() - (${options.minIdleMs}::double precision * interval '1 millisecond')`;
  const { rows } = await sql<{ id: string; message: unknown }>`
    update webhook_queue set claimed_at = now()
    where id in (
      select id from webhook_queue where ${claimable} order by id limit ${options.limit} for update skip locked
    )
    returning id, message
  `.execute(db);
  return rows
    .sort((a, b) => Number(BigInt(a.id) - BigInt(b.id)))
    .map((row) => ({ id: String(row.id), message: row.message }));
}

export async function ackWebhookWork(db: Kysely<Database>, ids: readonly string[]): Promise<void> {
  if (ids.length === 0) return;
  await db
    .deleteFrom('webhook_queue')
    .where('id', 'in', [...ids])
    .execute();
}

/** Entries nobody has claimed yet: the queue's lag. */
export async function countUnclaimedWebhookWork(db: Kysely<Database>): Promise<number> {
  const row = await db
    .selectFrom('webhook_queue')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('claimed_at', 'is', null)
    .executeTakeFirstOrThrow();
  return Number(row.count);
}
