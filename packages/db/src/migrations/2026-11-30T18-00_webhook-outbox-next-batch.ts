import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// The fan-out's next batch of undispatched outbox events, oldest first, locked (skipping rows another
// dispatcher holds). The query is the one the fan-out ran inline before; it is a function so that it can
// carry its own planner settings.
//
// Why: inline, its plan depended on the outbox's statistics. Right after a burst of publishes, before
// ANALYZE has seen the new rows (autovacuum runs at most once a minute, and only after 10 % of the table
// changed), the planner believed a few hundred rows were undispatched and picked a bitmap scan that reads
// every undispatched row and sorts them all, then keeps the first batch. Each batch read the whole
// backlog again: quadratic in the backlog (a 10,000-event backlog: ~7 ms of a ~25 ms, 500-event statement;
// a 100,000-event one: ten times the rows read per batch, ten times the batches). With bitmap and
// sequential scans off, the only plan left walks the undispatched index in `seq` order and stops after
// the batch, whatever the statistics say.
//
// `begin atomic` binds the table when the function is created (the schema it lives in), not through
// the caller's search_path. VOLATILE (the default): its statement takes a fresh snapshot after the
// caller's, which can only make it see more recent commits; rows the caller's statement cannot see yet
// are not updated by it and stay undispatched for the next pass.

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create function herald_webhook_outbox_next_batch(batch integer) returns setof text
    language sql
    set enable_bitmapscan = off
    set enable_seqscan = off
    begin atomic
      select id from webhook_outbox where dispatched_at is null order by seq limit batch
      for update skip locked;
    end`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop function herald_webhook_outbox_next_batch(integer)`.execute(db);
}
