import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// The fan-out's first step as a function: mark the next batch of undispatched outbox events dispatched,
// oldest first, skipping rows another dispatcher holds, and return them. The statement is the one the
// fan-out ran inline before; in a function it carries its own planner settings, so its plan no longer
// depends on the outbox's statistics.
//
// Why: right after a burst of publishes, before ANALYZE has seen the new rows (autovacuum analyzes at
// most once a minute, and only after 10 % of the table changed), the planner believed a few hundred rows
// were undispatched. It then picked a bitmap scan that reads every undispatched row and sorts them all to
// keep the first batch, so each batch read the whole backlog again: quadratic in the backlog (a
// 10,000-event backlog: ~7 ms of a ~25 ms, 500-event statement). A plan made while the outbox was small
// could also find the batch's rows by a sequential scan of the whole table. With sequential and bitmap
// scans, hash and merge joins off, one plan is left: walk the undispatched index in `seq` order, stop
// after the batch, and look each row up by primary key. The batch is an array computed once, not a
// subquery joined to the update: a plan made while the table was empty joined it as the inner side of a
// nested loop, which ran it again for every outbox row, each run locking and returning the next rows
// (a batch of 100 dispatched 3,000 events in the test).
//
// PL/pgSQL keeps the plan for the session (the fan-out runs every few milliseconds at a steady rate);
// `search_path from current` resolves the table in the schema the migration ran in, whatever the caller's
// search_path. Each call is its own statement with a fresh snapshot, as the inline statement was.

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create function herald_webhook_outbox_dispatch_next(batch integer)
    returns table (
      id text, seq bigint, org_id text, type text, body text,
      target_endpoint_id text, exclude_endpoint_id text, traceparent text
    )
    language plpgsql
    set search_path from current
    set enable_seqscan = off
    set enable_bitmapscan = off
    set enable_hashjoin = off
    set enable_mergejoin = off
    as $$
    begin
      return query
        update webhook_outbox event set dispatched_at = now()
        where event.id = any(array(
          select due.id from webhook_outbox due where due.dispatched_at is null order by due.seq limit batch
          for update skip locked
        ))
        returning event.id, event.seq, event.org_id, event.type, event.body,
          event.target_endpoint_id, event.exclude_endpoint_id, event.traceparent;
    end
    $$`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop function herald_webhook_outbox_dispatch_next(integer)`.execute(db);
}
