import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// The webhook engine's hot path without foreign keys. Every row a foreign key guards runs a
// check at the end of the statement: one query per row that looks the parent up and locks it
// `for key share` (a write to the parent's row header, WAL-logged). The fan-out paid two per delivery
// (its endpoint and its event), the record one per attempt, the slot registry one per lane. Dropped:
// PostgreSQL CPU per delivery in bench/lease-micro.ts (10,000 deliveries, cap 10, batches of 40, eight
// alternating rounds, medians): fan-out 47 → 33 µs, record and hand-over 74 → 68 µs.
//
// What the keys guaranteed is kept by the engine (packages/webhook-engine):
// - deliveries → endpoints: endpoints are soft-deleted; retention purges an endpoint's deliveries, then
//   the endpoint once none refers to it, then its slot rows. A delivery made for an endpoint while it
//   is purged is made SKIPPED (the fan-out gives a deleted endpoint nothing else) and retention deletes it.
// - deliveries → outbox: retention deletes an outbox event only once no delivery refers to it, and only
//   dispatched ones, which get no new delivery.
// - attempts → deliveries (was `on delete cascade`): retention deletes a delivery's attempts in the
//   statement that deletes the delivery.
// - slots → endpoints (was `on delete cascade`): retention deletes them with the endpoint.
// `webhook_endpoint_secrets` keeps its key: it is written only by GraphQL, never on the hot path.

const KEYS = [
  {
    table: 'webhook_deliveries',
    name: 'webhook_deliveries_endpoint_id_fkey',
    sql: sql`foreign key (endpoint_id) references webhook_endpoints (id) on delete cascade`,
  },
  {
    table: 'webhook_deliveries',
    name: 'webhook_deliveries_event_id_fkey',
    sql: sql`foreign key (event_id) references webhook_outbox (id)`,
  },
  {
    table: 'webhook_attempts',
    name: 'webhook_attempts_delivery_id_fkey',
    sql: sql`foreign key (delivery_id) references webhook_deliveries (id) on delete cascade`,
  },
  {
    table: 'webhook_endpoint_slots',
    name: 'webhook_endpoint_slots_endpoint_id_fkey',
    sql: sql`foreign key (endpoint_id) references webhook_endpoints (id) on delete cascade`,
  },
];

export async function up(db: Kysely<any>): Promise<void> {
  for (const key of KEYS) {
    await sql`alter table ${sql.table(key.table)} drop constraint ${sql.id(key.name)}`.execute(db);
  }
}

export async function down(db: Kysely<any>): Promise<void> {
  // `not valid`: rows written without the keys are not checked again (nor locked for the check).
  for (const key of KEYS) {
    await sql`alter table ${sql.table(key.table)} add constraint ${sql.id(key.name)} ${key.sql} not valid`.execute(db);
  }
}
