import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// Per-organisation overrides of the tenant quotas (docs/tenancy.md). A null column keeps the
// environment's default; 0 means no limit. One row per organisation that has any override.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('organization_limits')
    .addColumn('org_id', 'text', (col) => col.primaryKey())
    .addColumn('operations_per_second', 'integer', (col) => col.check(sqlNonNegative('operations_per_second')))
    .addColumn('publishes_per_second', 'integer', (col) => col.check(sqlNonNegative('publishes_per_second')))
    .addColumn('sockets_per_user', 'integer', (col) => col.check(sqlNonNegative('sockets_per_user')))
    .addColumn('subscriptions', 'integer', (col) => col.check(sqlNonNegative('subscriptions')))
    .addColumn('updated_at', 'timestamptz', (col) => col.notNull().defaultTo(sqlNow()))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('organization_limits').execute();
}

function sqlNonNegative(column: string) {
  return sql`${sql.ref(column)} >= 0`;
}

function sqlNow() {
  return sql`now()`;
}
