import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// An endpoint's optional filter on the event body: a JSON object the body must contain (`jsonb @>`)
// for the endpoint to get the event (docs/webhooks.md, "Filters"). Null: every event of its types.
// Nullable with no default, so adding it rewrites no row.

export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table webhook_endpoints add column filter jsonb`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table webhook_endpoints drop column filter`.execute(db);
}
