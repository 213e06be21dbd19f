import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// The webhook engine's straight path:
// - `webhook_deliveries_attempting_idx`: the per-endpoint cap counts the attempts in flight of an
//   endpoint at every claim; only rows with a live attempt lease (`a:…`) are in this index, so the
//   count costs the same with 10 or 100,000 deliveries waiting.
// - `dead_letter_streamed_at`: when the DEAD delivery was written to the dead-letter stream (the
//   alerting feed). Null until then, so a stream that could not be written is caught up later.
// - `webhook_deliveries_dead_idx` / `_succeeded_idx`: DLQ listing and retention walk these.
// - `webhook_outbox_dispatched_idx`: retention of dispatched outbox rows.
// - `webhook_endpoints.deleted_at`: an endpoint is soft-deleted in the request and purged in bounded
//   batches in the background, never by an unbounded cascade inside a GraphQL request.

export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index webhook_deliveries_attempting_idx on webhook_deliveries (endpoint_id)
    where lease_token like 'a:%'`.execute(db);
  await db.schema.alterTable('webhook_deliveries').addColumn('dead_letter_streamed_at', 'timestamptz').execute();
  await db.schema
    .createIndex('webhook_deliveries_dead_idx')
    .on('webhook_deliveries')
    .column('seq')
    .where(sql.ref('status'), '=', 'DEAD')
    .execute();
  await sql`create index webhook_deliveries_succeeded_idx on webhook_deliveries (updated_at)
    where status in ('SUCCEEDED', 'SKIPPED')`.execute(db);
  await db.schema
    .createIndex('webhook_outbox_dispatched_idx')
    .on('webhook_outbox')
    .column('dispatched_at')
    .where(sql.ref('dispatched_at'), 'is not', null)
    .execute();
  await db.schema.alterTable('webhook_endpoints').addColumn('deleted_at', 'timestamptz').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('webhook_endpoints').dropColumn('deleted_at').execute();
  await db.schema.dropIndex('webhook_outbox_dispatched_idx').execute();
  await db.schema.dropIndex('webhook_deliveries_succeeded_idx').execute();
  await db.schema.dropIndex('webhook_deliveries_dead_idx').execute();
  await db.schema.alterTable('webhook_deliveries').dropColumn('dead_letter_streamed_at').execute();
  await db.schema.dropIndex('webhook_deliveries_attempting_idx').execute();
}
