import type { Kysely } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// The W3C `traceparent` of the operation that wrote an outbox event (null when tracing is off), so the
// webhook attempts and the subscription fan-out of that event join the publishing trace
// (docs/operations.md, "Tracing"). Nullable, no default: adding it rewrites nothing.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('webhook_outbox').addColumn('traceparent', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('webhook_outbox').dropColumn('traceparent').execute();
}
