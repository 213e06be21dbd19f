import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// Two webhook throttles (docs/webhooks.md, docs/tenancy.md):
// - `webhook_endpoints.rate_limit_per_second`: attempts per second to one endpoint across every
//   dispatcher; null means no limit.
// - `organization_limits.webhook_attempts_in_flight`: an organisation's override of
//   TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT; null keeps the default, 0 means no limit.
// Both are nullable columns without a default: adding them rewrites no row.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('webhook_endpoints')
    .addColumn('rate_limit_per_second', 'integer', (col) => col.check(sql`rate_limit_per_second > 0`))
    .execute();
  await db.schema
    .alterTable('organization_limits')
    .addColumn('webhook_attempts_in_flight', 'integer', (col) => col.check(sql`webhook_attempts_in_flight >= 0`))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('organization_limits').dropColumn('webhook_attempts_in_flight').execute();
  await db.schema.alterTable('webhook_endpoints').dropColumn('rate_limit_per_second').execute();
}
