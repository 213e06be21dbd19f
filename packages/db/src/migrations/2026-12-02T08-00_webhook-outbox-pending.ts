import { type Kysely, sql } from 'kysely';
import { up as createFanOutFunction } from './2026-11-30T18-00_webhook-fan-out-function.js';
import { up as createClaimFunctions, down as dropClaimFunctions } from './2026-12-01T12-00_webhook-claim-functions.js';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// The events still to fan out get a queue of their own, `webhook_outbox_pending`: one narrow row (the
// event's `seq`) per event, written in the statement that records the event, and deleted by the fan-out
// that creates the event's deliveries. The fan-out used to mark each outbox row `dispatched_at`: an update
// that could not be HOT (the column is the key of one index and in the predicate of another), so each
// event was written a second time with a new entry in every outbox index. A delete from the queue writes
// one heap record and no index entry. In a new dispatcher's run over a 10,000-event backlog the fan-out
// was about two thirds of PostgreSQL's work for the run (bench/results/webhooks-fan-out-window/); priced
// with bench/micro/fan-out-queue-micro.ts, the fan-out costs ~22 % less PostgreSQL CPU per event; an
// event to fan out costs its publish a narrow row more (~40 µs of PostgreSQL CPU in a one-event
// transaction: bench/results/webhooks-outbox-pending/).
//
// The queue is filled by a trigger on each row inserted with `dispatched_at` null: every way an event is
// recorded (a post published, a test send, an operational event, a row a test or an operator writes by
// hand) queues it, and none can forget to. `dispatched_at` keeps one meaning only: set when the event was recorded with nothing to fan out (the API knows no endpoint wants it).
// "Not fanned out yet" is now "has a row in the queue": the fan-out, the FIFO claim's check for an earlier
// event of the organisation, the lag metric and retention read the queue. Retention finds old events by
// `created_at` (a new index; the index on `dispatched_at` and the partial index of undispatched rows go).
//
// Upgrading: stop every dispatcher of the old version before this migration runs. An old dispatcher calls
// the new fan-out function (nothing is lost or sent twice), but its own statements still take an event
// without `dispatched_at` as not fanned out: its FIFO lines would wait for ever, its lag metric would grow
// and its retention would keep every new event.

/** The claim's settings as the claim-functions migration gave them. */
const CLAIM_SETTINGS = sql`language plpgsql set search_path from current set enable_seqscan = off
    set plan_cache_mode = force_generic_plan set jit = off`;

export async function up(db: Kysely<any>): Promise<void> {
  await sql`create table webhook_outbox_pending (seq bigint primary key)`.execute(db);
  await sql`insert into webhook_outbox_pending (seq)
    select seq from webhook_outbox where dispatched_at is null`.execute(db);
  await sql`
    create function herald_webhook_outbox_queue() returns trigger
    language plpgsql set search_path from current
    as $$
    begin
      insert into webhook_outbox_pending (seq) values (new.seq);
      return null;
    end
    $$`.execute(db);
  // Per row, behind a WHEN that PostgreSQL checks without calling the function: an event recorded with
  // nothing to fan out costs nothing here (a statement-level trigger with a transition table cost every
  // insert ~25 µs, even those).
  await sql`
    create trigger webhook_outbox_queue after insert on webhook_outbox
    for each row when (new.dispatched_at is null) execute function herald_webhook_outbox_queue()
  `.execute(db);
  await sql`create index webhook_outbox_created_idx on webhook_outbox (created_at)`.execute(db);
  await sql`drop index webhook_outbox_undispatched_idx`.execute(db);
  await sql`drop index webhook_outbox_dispatched_idx`.execute(db);

  // The fan-out: as before (see the fan-out-function migration), but its batch is the oldest queue rows,
  // deleted (rows another dispatcher holds are skipped); the outbox rows are only read, by `seq`.
  await sql`
    create or replace function herald_webhook_fan_out(
      batch integer, lease text, lease_ms double precision, delivery_id_prefix text
    )
    returns table (events integer, traceparents text[], id text, endpoint_id text, status text)
    language plpgsql
    set search_path from current
    set enable_seqscan = off
    set enable_bitmapscan = off
    set plan_cache_mode = force_generic_plan
    set jit = off
    as $$
    #variable_conflict use_column
    begin
      perform set_config('synchronous_commit', 'off', true);
      return query
        with taken as (
          delete from webhook_outbox_pending pending
          where pending.seq = any(array(
            select due.seq from webhook_outbox_pending due order by due.seq limit batch for update skip locked
          ))
          returning pending.seq
        ), event as (
          select outbox.id, outbox.seq, outbox.org_id, outbox.type, outbox.body, outbox.target_endpoint_id,
            outbox.exclude_endpoint_id, outbox.traceparent
          from taken join webhook_outbox outbox on outbox.seq = taken.seq
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

  // The claim: unchanged but for its FIFO check, where an earlier event of the organisation still to fan
  // out is one with a queue row.
  await sql`
    create or replace function herald_webhook_claim(
      p_endpoints text[], p_ids text[], p_leases text[], p_chain text[], p_fifo boolean, p_endpoint_cap integer,
      p_lease text, p_lease_ms double precision
    )
    returns table (id text, event_id text, event_type text, org_id text, endpoint_id text, attempt_count integer,
      url text, rate_limit_per_second integer, fifo boolean, body text, traceparent text, age_ms double precision,
      secrets text[], fifo_seq bigint)
    ${CLAIM_SETTINGS}
    as $$
    #variable_conflict use_column
    begin
      -- Claims touching the same endpoint run one after the other, so each counts the others' slots.
      perform set_config('synchronous_commit', 'off', true);
      perform count(pg_advisory_xact_lock(keys.key)) from (
        select distinct hashtextextended(current_schema() || ':herald-claim:' || chained.endpoint_id, 0) as key
        from unnest(p_endpoints) as chained(endpoint_id) order by 1
      ) keys;
      return query
      with input as (
        select input.id, input.lease from unnest(p_ids, p_leases) as input(id, lease)
        limit cardinality(p_ids)
      ), cand as (
        select delivery.id, delivery.endpoint_id, delivery.next_attempt_at, delivery.seq, delivery.fifo_seq,
          delivery.org_id, exists (select 1 from webhook_outbox event where event.id = delivery.event_id) as has_event
        from input join webhook_deliveries delivery on delivery.id = input.id
        where delivery.status = 'PENDING'
          and (delivery.next_attempt_at <= now() or (delivery.next_attempt_at is null and delivery.fifo_seq is not null))
          and (delivery.lease_token = input.lease or delivery.leased_until is null or delivery.leased_until <= now())
        union
        -- A FIFO endpoint's chain: the head of its line (waiting, or due), when nobody holds it.
        select head.id, head.endpoint_id, head.next_attempt_at, head.seq, head.fifo_seq, head.org_id,
          exists (select 1 from webhook_outbox event where event.id = head.event_id) as has_event
        from (select chained.endpoint_id from unnest(p_chain) as chained(endpoint_id)
          where p_fifo limit cardinality(p_chain)) chained
        cross join lateral (
          select delivery.id, delivery.endpoint_id, delivery.event_id, delivery.next_attempt_at, delivery.seq,
            delivery.fifo_seq, delivery.org_id, delivery.lease_token, delivery.leased_until
          from webhook_deliveries delivery
          where delivery.endpoint_id = chained.endpoint_id and delivery.status = 'PENDING'
            and delivery.fifo_seq is not null
          order by delivery.fifo_seq limit 1
        ) head
        where (head.next_attempt_at is null or head.next_attempt_at <= now())
          and (head.leased_until is null or head.leased_until <= now() or head.lease_token like 'q:%')
        union
        -- Any other endpoint's chain: its earliest due deliveries.
        select next.id, next.endpoint_id, next.next_attempt_at, next.seq, next.fifo_seq, next.org_id,
          exists (select 1 from webhook_outbox event where event.id = next.event_id) as has_event
        from (select chained.endpoint_id from unnest(p_chain) as chained(endpoint_id) where not p_fifo) chained
        cross join lateral (
          select delivery.id, delivery.endpoint_id, delivery.event_id, delivery.next_attempt_at, delivery.seq,
            delivery.fifo_seq, delivery.org_id
          from webhook_deliveries delivery
          where delivery.endpoint_id = chained.endpoint_id and delivery.status = 'PENDING'
            and delivery.next_attempt_at <= now()
            -- A q-lease only says a stream entry names the delivery: a chain may take it (the entry
            -- then claims nothing). An a-lease is an attempt: only once it has expired.
            and (delivery.leased_until is null or delivery.leased_until <= now() or delivery.lease_token like 'q:%')
          order by delivery.next_attempt_at, delivery.seq
          limit p_endpoint_cap
        ) next
      ), endpoint as (
        select endpoint.id, endpoint.paused_until,
          endpoint.status = 'ENABLED' and endpoint.deleted_at is null as enabled,
          coalesce(endpoint.paused_until > now(), false) as paused,
          endpoint.ordering = 'FIFO' as fifo
        from webhook_endpoints endpoint where endpoint.id in (select cand.endpoint_id from cand)
      ), behind as (
        -- A FIFO endpoint's deliveries that are not the head of its line, or whose organisation has an
        -- earlier event not fanned out yet: not attempted now.
        select cand.id from cand join endpoint on endpoint.id = cand.endpoint_id
        where endpoint.fifo and cand.fifo_seq is not null and (
          cand.fifo_seq > (
            select ahead.fifo_seq from webhook_deliveries ahead
            where ahead.endpoint_id = cand.endpoint_id and ahead.status = 'PENDING' and ahead.fifo_seq is not null
            order by ahead.fifo_seq limit 1
          )
          or cand.fifo_seq > (
            select min(pending.seq) from webhook_outbox_pending pending
            join webhook_outbox event on event.seq = pending.seq
            where pending.seq < cand.fifo_seq and event.org_id = cand.org_id
          )
        )
      ), slot as (
        select registration.endpoint_id, registration.lease, registration.slots,
          registration.leased_until > now() as live
        from webhook_endpoint_slots registration
        where registration.endpoint_id in (select cand.endpoint_id from cand) and registration.lease <> p_lease
      ), gone as (
        -- Registrations of lanes that ended (0 slots) or died (past their lease), locked so that none
        -- comes back to life behind this claim (they are deleted below). One being changed right now, or
        -- renewed since this statement's snapshot, is not locked here and counts as live.
        select registration.endpoint_id, registration.lease from webhook_endpoint_slots registration
        where registration.endpoint_id in (select cand.endpoint_id from cand) and registration.lease <> p_lease
          and (registration.slots = 0 or registration.leased_until <= now())
        for update skip locked
      ), busy as (
        -- Others' slots.
        select slot.endpoint_id, sum(slot.slots)::int as n from slot
        where slot.live or not exists (
          select 1 from gone where gone.endpoint_id = slot.endpoint_id and gone.lease = slot.lease
        )
        group by slot.endpoint_id
      ), ranked as (
        select cand.id, cand.endpoint_id, endpoint.fifo,
          row_number() over (partition by cand.endpoint_id order by cand.next_attempt_at, cand.seq) as rank
        from cand join endpoint on endpoint.id = cand.endpoint_id
        where endpoint.enabled and not endpoint.paused and cand.has_event and cand.id not in (select behind.id from behind)
      ), picked as (
        -- A FIFO endpoint has one attempt in flight at most, across all dispatchers.
        select ranked.id from ranked left join busy on busy.endpoint_id = ranked.endpoint_id
        where ranked.rank + coalesce(busy.n, 0) <= case when ranked.fifo then 1 else p_endpoint_cap end
      ), claimed as (
        -- Re-checked on the row's latest version should a record's hand-over have taken it meanwhile: a
        -- live a-lease is never overwritten, and a delivery another writer moved ahead (a pause, a retry) is
        -- not taken before it is due.
        update webhook_deliveries delivery
        set lease_token = p_lease, leased_until = now() + p_lease_ms * interval '1 millisecond'
        from picked where delivery.id = picked.id and delivery.status = 'PENDING'
          and not coalesce(delivery.lease_token like 'a:%' and delivery.leased_until > now(), false)
          and (delivery.next_attempt_at <= now() or (delivery.next_attempt_at is null and delivery.fifo_seq is not null))
        returning delivery.id, delivery.event_id, delivery.event_type, delivery.org_id, delivery.endpoint_id,
          delivery.attempt_count, delivery.horizon_from, delivery.fifo_seq
      ), registered as (
        -- The lane's slots are what it claimed (a lane claims only once it holds nothing).
        insert into webhook_endpoint_slots (endpoint_id, lease, slots, leased_until)
        select claimed.endpoint_id, p_lease, count(1), now() + p_lease_ms * interval '1 millisecond'
        from claimed group by claimed.endpoint_id
        on conflict (endpoint_id, lease) do update set slots = excluded.slots, leased_until = excluded.leased_until
      ), expired as (
        delete from webhook_endpoint_slots registration using gone
        where registration.endpoint_id = gone.endpoint_id and registration.lease = gone.lease
      ), skipped as (
        -- A delivery whose endpoint row or event is gone altogether is skipped like one of a deleted
        -- endpoint, not handed out again forever; one whose event is gone in "orphaned".
        update webhook_deliveries delivery
        set status = 'SKIPPED', next_attempt_at = null, lease_token = null, leased_until = null, updated_at = now()
        from cand left join endpoint on endpoint.id = cand.endpoint_id
        where delivery.id = cand.id and not coalesce(endpoint.enabled, false) and cand.has_event
        returning delivery.id
      ), orphaned as (
        update webhook_deliveries delivery
        set status = 'SKIPPED', next_attempt_at = null, lease_token = null, leased_until = null, updated_at = now()
        -- (The ids as an array, looked up by primary key: a hash join with the candidates could read the
        -- whole table.)
        where delivery.id = any(array(select cand.id from cand where not cand.has_event))
        returning delivery.id
      ), released as (
        update webhook_deliveries delivery
        set lease_token = null, leased_until = null, next_attempt_at = endpoint.paused_until
        from cand join endpoint on endpoint.id = cand.endpoint_id
        where delivery.id = cand.id and endpoint.enabled and endpoint.paused and cand.has_event
          and cand.id not in (select behind.id from behind)
        returning delivery.id
      )
      select claimed.id::text, claimed.event_id::text, claimed.event_type::text, claimed.org_id::text,
        claimed.endpoint_id::text, claimed.attempt_count::integer, endpoint.url::text,
        endpoint.rate_limit_per_second::integer, endpoint.ordering = 'FIFO', event.body::text,
        event.traceparent::text,
        (extract(epoch from now() - claimed.horizon_from) * 1000)::double precision,
        (select array_agg(secret.sealed_secret::text order by secret.id desc) from webhook_endpoint_secrets secret
          where secret.endpoint_id = claimed.endpoint_id and secret.sealed_secret is not null
            and (secret.expires_at is null or secret.expires_at > now())
        ),
        claimed.fifo_seq::bigint
      from claimed
      join webhook_endpoints endpoint on endpoint.id = claimed.endpoint_id
      join webhook_outbox event on event.id = claimed.event_id
      order by claimed.fifo_seq, claimed.id;
    end
    $$`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  // Every event fanned out since gets its mark back (its deliveries' time is not kept: its record's).
  await sql`update webhook_outbox event set dispatched_at = event.created_at
    where event.dispatched_at is null
      and not exists (select 1 from webhook_outbox_pending pending where pending.seq = event.seq)`.execute(db);
  // The functions as they were: the claim-functions migration's down and up around the fan-out's own.
  await dropClaimFunctions(db);
  await sql`drop function herald_webhook_fan_out(integer, text, double precision, text)`.execute(db);
  await createFanOutFunction(db);
  await createClaimFunctions(db);
  await sql`create index webhook_outbox_undispatched_idx on webhook_outbox (seq) where dispatched_at is null`.execute(
    db,
  );
  await sql`create index webhook_outbox_dispatched_idx on webhook_outbox (dispatched_at)
    where dispatched_at is not null`.execute(db);
  await sql`drop index webhook_outbox_created_idx`.execute(db);
  await sql`drop trigger webhook_outbox_queue on webhook_outbox`.execute(db);
  await sql`drop function herald_webhook_outbox_queue()`.execute(db);
  await sql`drop table webhook_outbox_pending`.execute(db);
}
