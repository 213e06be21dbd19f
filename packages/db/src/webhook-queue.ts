import type { Kysely } from 'kysely';
import type { Database } from './database.js';

/*
 * Embedded mode's work queue (no Redis): a table read with `for update skip locked`. An entry is
 * claimed by setting `claimed_at`, acknowledged by deleting it, and claimed again by anyone once it has
 * been claimed longer than the caller's idle limit: the semantics of a Redis consumer group's
 * pending-entries list and XAUTOCLAIM. The claim statement lives with the queue that runs it
 * (@herald/webhook-engine, queue/database-queue.ts); these are the plain reads and writes.
 */

export async function enqueueWebhookWork(db: Kysely<Database>, messages: readonly unknown[]): Promise<void> {
  if (messages.length === 0) return;
  await db
    .insertInto('webhook_queue')
    .values(messages.map((message) => ({ message: JSON.stringify(message) })))
    .execute();
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
