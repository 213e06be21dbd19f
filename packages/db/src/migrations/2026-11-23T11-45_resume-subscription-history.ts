import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// Resumable subscriptions: the webhook outbox is also the durable source of the
// subscription history. `historied_at` marks an outbox event that entered the history (and went out
// live); the API's history relay moves the rest, in outbox order. Events recorded before this
// migration are not replayed into the history: they are marked now.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('webhook_outbox').addColumn('historied_at', 'timestamptz').execute();
  await sql`update webhook_outbox set historied_at = created_at`.execute(db);
  await sql`create index webhook_outbox_history_pending on webhook_outbox (seq)
    where historied_at is null and type = 'post.published'`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop index if exists webhook_outbox_history_pending`.execute(db);
  await db.schema.alterTable('webhook_outbox').dropColumn('historied_at').execute();
}
