import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// Direct history appends: the pod that publishes a post appends its event to the
// subscription history itself, right after the commit, and marks it `historied_at` later in batches.
// `history_handed_at` records that an event was handed to the history relay instead: its publisher
// could not append it (Redis unreachable), or the organisation already had a handed event waiting.
// While an organisation has such an event pending, every new publish there is handed over too, so the
// relay appends them in outbox order: an event answered before another was sent is never overtaken.
// The partial index holds only handed events not yet in the history: empty outside an outage, so the
// check each publish makes is one probe of an empty index.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('webhook_outbox').addColumn('history_handed_at', 'timestamptz').execute();
  await sql`create index webhook_outbox_history_handed on webhook_outbox (org_id)
    where historied_at is null and history_handed_at is not null`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop index if exists webhook_outbox_history_handed`.execute(db);
  await db.schema.alterTable('webhook_outbox').dropColumn('history_handed_at').execute();
}
