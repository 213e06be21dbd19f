import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// Webhooks: endpoints and their signing secrets, the outbox that records each event in the
// transaction of the change that caused it, one delivery per (event, endpoint), and every attempt.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('webhook_endpoints')
    .addColumn('id', 'text', (col) => col.primaryKey())
    .addColumn('seq', 'bigint', (col) => col.generatedAlwaysAsIdentity().notNull().unique())
    .addColumn('org_id', 'text', (col) => col.notNull())
    .addColumn('url', 'text', (col) => col.notNull())
    .addColumn('event_types', sql`text[]`, (col) => col.notNull())
    .addColumn('created_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema
    .createIndex('webhook_endpoints_org_id_seq_idx')
    .on('webhook_endpoints')
    .columns(['org_id', 'seq'])
    .execute();

  // Several rows per endpoint while a secret is being rotated: the old one keeps signing until
  // `expires_at`, so receivers see one `v1=` per row that has not expired.
  await db.schema
    .createTable('webhook_endpoint_secrets')
    .addColumn('id', 'bigint', (col) => col.generatedAlwaysAsIdentity().primaryKey())
    .addColumn('endpoint_id', 'text', (col) => col.notNull().references('webhook_endpoints.id').onDelete('cascade'))
    .addColumn('secret', 'text', (col) => col.notNull())
    .addColumn('created_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('expires_at', 'timestamptz')
    .execute();
  await db.schema
    .createIndex('webhook_endpoint_secrets_endpoint_id_idx')
    .on('webhook_endpoint_secrets')
    .column('endpoint_id')
    .execute();

  // The outbox: `body` is the exact JSON every attempt signs. `relayed_at` is when a relay last handed
  // the event to the queue; `dispatched_at` is when a dispatcher created its deliveries (the event's
  // acknowledgement). Rows are kept after dispatch: retries and replays read the body from here.
  await db.schema
    .createTable('webhook_outbox')
    .addColumn('id', 'text', (col) => col.primaryKey())
    .addColumn('seq', 'bigint', (col) => col.generatedAlwaysAsIdentity().notNull().unique())
    .addColumn('org_id', 'text', (col) => col.notNull())
    .addColumn('type', 'text', (col) => col.notNull())
    .addColumn('body', 'text', (col) => col.notNull())
    .addColumn('created_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('relayed_at', 'timestamptz')
    .addColumn('dispatched_at', 'timestamptz')
    .execute();
  await db.schema
    .createIndex('webhook_outbox_undispatched_idx')
    .on('webhook_outbox')
    .column('seq')
    .where(sql.ref('dispatched_at'), 'is', null)
    .execute();

  // One delivery per (event, endpoint): a duplicate event in the queue can never deliver twice.
  // `lease_token`/`leased_until` say who holds the delivery right now: `q:…` while its work item sits
  // in the queue, `a:…` while a dispatcher is making an attempt. An expired lease means nobody does.
  await db.schema
    .createTable('webhook_deliveries')
    .addColumn('id', 'text', (col) => col.primaryKey())
    .addColumn('seq', 'bigint', (col) => col.generatedAlwaysAsIdentity().notNull().unique())
    .addColumn('event_id', 'text', (col) => col.notNull().references('webhook_outbox.id'))
    .addColumn('endpoint_id', 'text', (col) => col.notNull().references('webhook_endpoints.id').onDelete('cascade'))
    .addColumn('org_id', 'text', (col) => col.notNull())
    .addColumn('event_type', 'text', (col) => col.notNull())
    .addColumn('status', 'text', (col) =>
      col.notNull().defaultTo('PENDING').check(sql`status in ('PENDING', 'SUCCEEDED', 'DEAD')`),
    )
    .addColumn('attempt_count', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'timestamptz')
    .addColumn('horizon_from', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('lease_token', 'text')
    .addColumn('leased_until', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (col) => col.notNull().defaultTo(sql`now()`))
    .addUniqueConstraint('webhook_deliveries_event_id_endpoint_id_key', ['event_id', 'endpoint_id'])
    .execute();
  await db.schema
    .createIndex('webhook_deliveries_endpoint_id_seq_idx')
    .on('webhook_deliveries')
    .columns(['endpoint_id', 'seq desc'])
    .execute();
  await db.schema
    .createIndex('webhook_deliveries_pending_idx')
    .on('webhook_deliveries')
    .columns(['next_attempt_at'])
    .where(sql.ref('status'), '=', 'PENDING')
    .execute();

  await db.schema
    .createTable('webhook_attempts')
    .addColumn('id', 'bigint', (col) => col.generatedAlwaysAsIdentity().primaryKey())
    .addColumn('delivery_id', 'text', (col) => col.notNull().references('webhook_deliveries.id').onDelete('cascade'))
    .addColumn('at', 'timestamptz', (col) => col.notNull())
    .addColumn('status_code', 'integer')
    .addColumn('duration_ms', 'integer', (col) => col.notNull())
    .addColumn('error', 'text')
    .execute();
  await db.schema
    .createIndex('webhook_attempts_delivery_id_idx')
    .on('webhook_attempts')
    .columns(['delivery_id', 'id'])
    .execute();

  // The work queue of embedded mode (no Redis): the same entries the Redis stream carries.
  await db.schema
    .createTable('webhook_queue')
    .addColumn('id', 'bigint', (col) => col.generatedAlwaysAsIdentity().primaryKey())
    .addColumn('message', 'jsonb', (col) => col.notNull())
    .addColumn('claimed_at', 'timestamptz')
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('webhook_queue').execute();
  await db.schema.dropTable('webhook_attempts').execute();
  await db.schema.dropTable('webhook_deliveries').execute();
  await db.schema.dropTable('webhook_outbox').execute();
  await db.schema.dropTable('webhook_endpoint_secrets').execute();
  await db.schema.dropTable('webhook_endpoints').execute();
}
