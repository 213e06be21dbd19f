import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// Endpoint health and tenant tools:
// - an endpoint is ENABLED or DISABLED; `disabled_at`/`disabled_reason` say when and why;
//   `failing_since` is the first failed attempt of the current streak (null after any success), so
//   "every attempt has failed for WEBHOOK_DISABLE_AFTER" is one comparison; `paused_until` is set by a
//   429/503 with Retry-After: no attempt to the endpoint before it.
// - a delivery may be SKIPPED: the event was recorded while its endpoint was disabled.
// - an attempt keeps the first bytes of the receiver's answer (bounded by the engine).
// - an outbox event may target one endpoint (`webhook.test`) or exclude one (operational events are
//   never sent to the endpoint they are about).

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('webhook_endpoints')
    .addColumn('status', 'text', (col) =>
      col.notNull().defaultTo('ENABLED').check(sql`status in ('ENABLED', 'DISABLED')`),
    )
    .addColumn('disabled_at', 'timestamptz')
    .addColumn('disabled_reason', 'text')
    .addColumn('failing_since', 'timestamptz')
    .addColumn('paused_until', 'timestamptz')
    .execute();

  await sql`alter table webhook_deliveries drop constraint if exists webhook_deliveries_status_check`.execute(db);
  await sql`alter table webhook_deliveries add constraint webhook_deliveries_status_check
    check (status in ('PENDING', 'SUCCEEDED', 'DEAD', 'SKIPPED'))`.execute(db);

  await db.schema.alterTable('webhook_attempts').addColumn('response_body', 'text').execute();

  await db.schema
    .alterTable('webhook_outbox')
    .addColumn('target_endpoint_id', 'text')
    .addColumn('exclude_endpoint_id', 'text')
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('webhook_outbox')
    .dropColumn('target_endpoint_id')
    .dropColumn('exclude_endpoint_id')
    .execute();
  await db.schema.alterTable('webhook_attempts').dropColumn('response_body').execute();
  await sql`alter table webhook_deliveries drop constraint if exists webhook_deliveries_status_check`.execute(db);
  await sql`alter table webhook_deliveries add constraint webhook_deliveries_status_check
    check (status in ('PENDING', 'SUCCEEDED', 'DEAD'))`.execute(db);
  await db.schema
    .alterTable('webhook_endpoints')
    .dropColumn('status')
    .dropColumn('disabled_at')
    .dropColumn('disabled_reason')
    .dropColumn('failing_since')
    .dropColumn('paused_until')
    .execute();
}
