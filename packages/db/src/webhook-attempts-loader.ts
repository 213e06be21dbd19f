import DataLoader from 'dataloader';
import { type Kysely, sql } from 'kysely';
import type { Database } from './database.js';
import type { WebhookAttempt } from './webhook-tables.js';

export type WebhookAttemptsLoader = DataLoader<string, WebhookAttempt[]>;

/**
 * Batches attempt look-ups by delivery id, oldest attempt first: a page of N deliveries costs one query
 * for all their attempts. Create one per request; its cache must never outlive the operation.
 */
export function createWebhookAttemptsLoader(db: Kysely<Database>): WebhookAttemptsLoader {
  return new DataLoader(async (deliveryIds) => {
    // In the order they were made (a success kept on its delivery has no id).
    const rows = await db
      .selectFrom('webhook_attempt_log')
      .selectAll()
      .where('delivery_id', 'in', [...deliveryIds])
      .orderBy('at')
      .orderBy(sql`id nulls last`)
      .execute();
    const byDelivery = new Map<string, WebhookAttempt[]>();
    for (const row of rows) {
      const list = byDelivery.get(row.delivery_id);
      if (list) list.push(row);
      else byDelivery.set(row.delivery_id, [row]);
    }
    return deliveryIds.map((id) => byDelivery.get(id) ?? []);
  });
}
