import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// The per-endpoint cap counted in a slot registry instead of in delivery rows:
// - `webhook_endpoint_slots`: one row per lane (an endpoint and the a-lease a dispatcher holds its
//   deliveries under) saying how many POSTs it may have in flight, live until `leased_until`. Claims
//   add up the live rows of an endpoint under its advisory lock (lease-protocol.ts, steps 3 and 3b).
// - `webhook_deliveries_attempting_idx` goes: it was how claims counted a-leased rows, and because
//   its predicate reads `lease_token`, no claim could be a HOT update (every claim wrote a new entry
//   into each of the table's indexes). Without it a claim changes no indexed column, and
//   `fillfactor = 50` leaves each page room for that second row version: PostgreSQL CPU per
//   delivery ~30–37 % lower in bench/lease-micro.ts (6,000 deliveries, cap 10, batches of 40).
//   The fillfactor applies to pages written from now on; nothing is rewritten.
//
// Upgrading: dispatchers of the previous version count a-leased rows, so they see the new ones' rows
// (held-ahead ones included: they hold back more than needed), but the new ones do not see what the old
// ones have in flight. Run one version at a time (stop the old dispatchers, then start the new ones).

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('webhook_endpoint_slots')
    .addColumn('endpoint_id', 'text', (col) => col.notNull().references('webhook_endpoints.id').onDelete('cascade'))
    .addColumn('lease', 'text', (col) => col.notNull())
    .addColumn('slots', 'integer', (col) => col.notNull())
    .addColumn('leased_until', 'timestamptz', (col) => col.notNull())
    .addPrimaryKeyConstraint('webhook_endpoint_slots_pkey', ['endpoint_id', 'lease'])
    .execute();
  await sql`alter table webhook_endpoint_slots set (fillfactor = 50)`.execute(db);
  await db.schema.dropIndex('webhook_deliveries_attempting_idx').execute();
  await sql`alter table webhook_deliveries set (fillfactor = 50)`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table webhook_deliveries reset (fillfactor)`.execute(db);
  await sql`create index webhook_deliveries_attempting_idx on webhook_deliveries (endpoint_id)
    where lease_token like 'a:%'`.execute(db);
  await db.schema.dropTable('webhook_endpoint_slots').execute();
}
