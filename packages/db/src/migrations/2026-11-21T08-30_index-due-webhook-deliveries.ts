import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// A dispatcher that finishes an attempt takes the same endpoint's next due delivery at once
// (`claimNextDueDelivery`): that look-up is by endpoint, among pending deliveries, earliest due first.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createIndex('webhook_deliveries_endpoint_due_idx')
    .on('webhook_deliveries')
    .columns(['endpoint_id', 'next_attempt_at', 'seq'])
    .where(sql.ref('status'), '=', 'PENDING')
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('webhook_deliveries_endpoint_due_idx').execute();
}
