import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import type { WebhookDelivery } from './webhook-tables.js';

/*
 * Deliveries as the API reads them. The database is the source of truth for every delivery's state;
 * every statement that changes one (fan-out, claim, record, replay, test send, ...) lives with its
 * lease protocol in @herald/webhook-engine (lease-protocol.ts).
 */

export async function findWebhookDeliveryById(db: Kysely<Database>, id: string): Promise<WebhookDelivery | undefined> {
  return db.selectFrom('webhook_deliveries').selectAll().where('id', '=', id).executeTakeFirst();
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
