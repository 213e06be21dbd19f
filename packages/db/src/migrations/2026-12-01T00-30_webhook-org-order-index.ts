import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// `webhook_endpoints_org_fifo_idx`: whether an organisation has an ordered (FIFO) endpoint, asked
// each time one of its events is recorded (see `orgOrderLock` in webhook-outbox.ts). Holds the FIFO
// endpoints only, so for most organisations the probe finds an empty range at once, however many
// endpoints (ordered or not) other organisations have.

export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index webhook_endpoints_org_fifo_idx on webhook_endpoints (org_id)
    where ordering = 'FIFO' and deleted_at is null`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('webhook_endpoints_org_fifo_idx').execute();
}
