import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// Ordered (FIFO) webhook endpoints (docs/webhooks.md, "Ordered endpoints"; the webhook engine's
// lease-protocol.ts, "FIFO endpoints"):
// - `webhook_endpoints.ordering`: UNORDERED (every endpoint so far) or FIFO.
// - `webhook_deliveries.fifo_seq`: a FIFO endpoint's delivery's place in its line, the outbox `seq` of
//   its event (a replay takes a fresh one from the same sequence: the back of the line). Null for
//   every other delivery, so unordered endpoints write nothing more to the index below.
// - `webhook_deliveries_fifo_line_idx`: an endpoint's line, head first; holds FIFO deliveries still
//   PENDING only.
// - `webhook_endpoints_fifo_idx`: the due scan walks the FIFO endpoints to find heads waiting in line.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('webhook_endpoints')
    .addColumn('ordering', 'text', (col) =>
      col.notNull().defaultTo('UNORDERED').check(sql`ordering in ('UNORDERED', 'FIFO')`),
    )
    .execute();
  await db.schema.alterTable('webhook_deliveries').addColumn('fifo_seq', 'bigint').execute();
  await sql`create index webhook_deliveries_fifo_line_idx on webhook_deliveries (endpoint_id, fifo_seq)
    where status = 'PENDING' and fifo_seq is not null`.execute(db);
  await sql`create index webhook_endpoints_fifo_idx on webhook_endpoints (id)
    where ordering = 'FIFO' and deleted_at is null`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('webhook_endpoints_fifo_idx').execute();
  await db.schema.dropIndex('webhook_deliveries_fifo_line_idx').execute();
  await db.schema.alterTable('webhook_deliveries').dropColumn('fifo_seq').execute();
  await db.schema.alterTable('webhook_endpoints').dropColumn('ordering').execute();
}
