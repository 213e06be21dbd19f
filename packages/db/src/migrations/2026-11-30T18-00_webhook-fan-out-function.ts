import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// The dispatcher's fan-out as a function: the next batch of undispatched outbox events, oldest first
// (rows another dispatcher holds are skipped), marked dispatched, and their deliveries created, in one
// statement, as the fan-out ran it inline before. A function can carry its own planner settings, so the
// plan no longer depends on the outbox's statistics.
//
// Why: right after a burst of publishes, before ANALYZE has seen the new rows (autovacuum analyzes at
// most once a minute, and only after 10 % of the table changed), the planner believed a few hundred rows
// were undispatched. It then picked a bitmap scan that reads every undispatched row and sorts them all to
// keep the first batch, so each batch read the whole backlog again: quadratic in the backlog (a
// 10,000-event backlog: ~7 ms of a ~25 ms, 500-event statement). A plan made while the outbox was small
// could also find the batch's rows by a sequential scan of the whole table. With sequential and bitmap
// scans off, the batch is read through the undispatched index in `seq` order and each row is looked up by
// primary key. The batch is an array computed once, not a subquery joined to the update: a plan made while
// the table was empty joined such a subquery as the inner side of a nested loop, which ran it again for
// every outbox row, each run locking and returning the next rows.
//
// One statement, so one snapshot for the update and the endpoints it is matched with. (A function that
// only marked the batch, called from the fan-out's statement, saw a newer snapshot than the statement's
// join with the endpoints: an event committed in between was marked dispatched but matched against
// endpoints as they were before, so an endpoint created just before it got no delivery.)
//
// The fan-out's SQL lives here from now on: a change to how events match endpoints is a new migration that
// replaces this function. PL/pgSQL keeps the plan for the session (the fan-out runs every few
// milliseconds at a steady rate); `search_path from current` resolves the tables in the schema the
// migration ran in. Returns one row with the batch's event count and its sampled trace contexts (the
// flags' low hex digit is odd), then one row per delivery created.

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create function herald_webhook_fan_out(
      batch integer, lease text, lease_ms double precision, delivery_id_prefix text
    )
    returns table (events integer, traceparents text[], id text, endpoint_id text, status text)
    language plpgsql
    set search_path from current
    set enable_seqscan = off
    set enable_bitmapscan = off
    as $$
    #variable_conflict use_column
    begin
      -- The deliveries are queued in Redis after the commit; losing them with a crash only delays them
      -- (their q-leases expire and the due scan queues them again).
      perform set_config('synchronous_commit', 'off', true);
      return query
        with event as (
          update webhook_outbox outbox set dispatched_at = now()
          where outbox.id = any(array(
            select due.id from webhook_outbox due where due.dispatched_at is null order by due.seq limit batch
            for update skip locked
          ))
          returning outbox.id, outbox.seq, outbox.org_id, outbox.type, outbox.body, outbox.target_endpoint_id,
            outbox.exclude_endpoint_id, outbox.traceparent
        ), created as (
          insert into webhook_deliveries
            (id, event_id, endpoint_id, org_id, event_type, status, next_attempt_at, lease_token, leased_until,
              fifo_seq)
          select delivery_id_prefix || replace(gen_random_uuid()::text, '-', ''),
            event.id, endpoint.id, event.org_id, event.type,
            case when enabled then 'PENDING' else 'SKIPPED' end,
            -- A FIFO endpoint's delivery waits in its line (no due time).
            case when enabled and endpoint.ordering <> 'FIFO' then now() end,
            case when enabled then lease end,
            case when enabled then now() + lease_ms * interval '1 millisecond' end,
            case when enabled and endpoint.ordering = 'FIFO' then event.seq end
          from event
          join webhook_endpoints endpoint on endpoint.org_id = event.org_id
          cross join lateral (select endpoint.status = 'ENABLED' and endpoint.deleted_at is null as enabled) state
          where case
            when event.target_endpoint_id is not null then endpoint.id = event.target_endpoint_id
            else event.type = any(endpoint.event_types) and endpoint.id is distinct from event.exclude_endpoint_id
              and endpoint.deleted_at is null
              and case when endpoint.filter is null then true else event.body::jsonb @> endpoint.filter end
          end
          order by event.seq, endpoint.seq
          on conflict (event_id, endpoint_id) do nothing
          returning webhook_deliveries.id, webhook_deliveries.endpoint_id, webhook_deliveries.status
        )
        select counted.events, counted.traceparents, null::text, null::text, null::text
        from (select count(1)::integer as events,
            array_agg(event.traceparent)
              filter (where right(event.traceparent, 1) in ('1', '3', '5', '7', '9', 'b', 'd', 'f')) as traceparents
          from event) counted
        union all
        select null::integer, null::text[], created.id::text, created.endpoint_id::text, created.status::text
        from created;
    end
    $$`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop function herald_webhook_fan_out(integer, text, double precision, text)`.execute(db);
}
