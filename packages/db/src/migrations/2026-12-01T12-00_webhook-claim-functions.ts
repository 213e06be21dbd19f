import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// A lane's claim and its slot growth as functions: each was a transaction of four round trips (BEGIN, the
// advisory locks, the statement, COMMIT), now one call. At a steady rate a lane claims often (a lane that
// ran dry claims again for the next work entry), so these round trips were about a quarter of a
// dispatcher's statements.
//
// The order inside stays what it was: the endpoints' advisory locks first (sorted, so two claims never
// wait for each other crosswise), then the statement. A VOLATILE PL/pgSQL function takes a fresh snapshot
// for each statement it runs, so the statement sees everything the lock's previous holder committed, as
// the statement after the lock did in the transaction. The locks are transaction locks: held until the
// calling statement commits. The claim commits without waiting for the WAL flush, as before (a lost claim
// only delays its deliveries: its leases expire).
//
// The statements are those the dispatcher sent itself, unchanged but for their parameters; a FIFO chain
// and an unordered one are two branches of the candidates, of which `fifo` runs one. PL/pgSQL keeps the
// plans for the session as prepared statements did. A change to either statement is a new migration that
// replaces the function. `search_path from current` resolves the tables in the schema the migration ran in.
// Their plans are generic, made once per session (`plan_cache_mode = force_generic_plan`): PostgreSQL
// otherwise judged each call's own plan cheaper (it estimates the ids' array from its actual length) and
// planned the claim again at every call, about three quarters of its CPU (2.5 ms against 0.55 ms per claim of
// one delivery, on one connection: bench/micro/claim-micro.ts). JIT compilation is off in them: a generic
// plan cannot know which endpoint it reads, so its estimates grow with the tables, and past PostgreSQL's
// `jit_above_cost` every call compiled the plan again (over 100 ms per claim with 16,000 deliveries, against
// half a millisecond without). The fan-out function gets both settings; its plan was already made not to
// depend on the statistics. Sequential scans are off inside the new functions, as in the fan-out:
// every table they read is looked up by key, and a generic plan made while a table was small would
// otherwise read it whole once it has grown.
// Both return what the statements returned.

/** Both functions' language and settings (see above). */
const FUNCTION_SETTINGS = sql`language plpgsql set search_path from current set enable_seqscan = off
    set plan_cache_mode = force_generic_plan set jit = off`;

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create function herald_webhook_claim(
      p_endpoints text[], p_ids text[], p_leases text[], p_chain text[], p_fifo boolean, p_endpoint_cap integer,
      p_lease text, p_lease_ms double precision
    )
    returns table (id text, event_id text, event_type text, org_id text, endpoint_id text, attempt_count integer,
      url text, rate_limit_per_second integer, fifo boolean, body text, traceparent text, age_ms double precision,
      secrets text[], fifo_seq bigint)
    ${FUNCTION_SETTINGS}
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
            select min(event.seq) from webhook_outbox event
            where event.dispatched_at is null and event.seq < cand.fifo_seq and event.org_id = cand.org_id
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

  await sql`
    create function herald_webhook_grow_slots(
      p_endpoint_id text, p_lease text, p_want integer, p_endpoint_cap integer
    )
    returns table (slots integer, others integer)
    ${FUNCTION_SETTINGS}
    as $$
    #variable_conflict use_column
    begin
      perform set_config('synchronous_commit', 'off', true);
      perform pg_advisory_xact_lock(hashtextextended(current_schema() || ':herald-claim:' || p_endpoint_id, 0));
      return query
      with slot as (
        select registration.lease, registration.slots, registration.leased_until > now() as live
        from webhook_endpoint_slots registration
        where registration.endpoint_id = p_endpoint_id and registration.lease <> p_lease
      ), gone as (
        -- As in a claim: ended or dead registrations are locked unless being changed, then deleted.
        select registration.lease from webhook_endpoint_slots registration
        where registration.endpoint_id = p_endpoint_id and registration.lease <> p_lease
          and (registration.slots = 0 or registration.leased_until <= now())
        for update skip locked
      ), dropped as (
        delete from webhook_endpoint_slots registration using gone
        where registration.endpoint_id = p_endpoint_id and registration.lease = gone.lease
      ), others as (
        select coalesce(sum(slot.slots) filter (where slot.live or slot.lease not in (select gone.lease from gone)), 0)::int as n
        from slot
      ), grown as (
        update webhook_endpoint_slots registration
        set slots = greatest(registration.slots, least(p_endpoint_cap - others.n, p_want,
          -- A FIFO endpoint: one attempt at a time.
          case when endpoint.ordering = 'FIFO' then 1 end))
        from others, webhook_endpoints endpoint
        where registration.endpoint_id = p_endpoint_id and registration.lease = p_lease
          and registration.leased_until > now() and registration.slots > 0 and endpoint.id = p_endpoint_id
        returning registration.slots
      )
      select (select grown.slots from grown)::integer, others.n::integer from others;
    end
    $$`.execute(db);

  // The fan-out's plan too: made once per session, from the start, and never JIT-compiled (see above).
  await sql`
    alter function herald_webhook_fan_out(integer, text, double precision, text)
    set plan_cache_mode = force_generic_plan
  `.execute(db);
  await sql`alter function herald_webhook_fan_out(integer, text, double precision, text) set jit = off`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter function herald_webhook_fan_out(integer, text, double precision, text) reset jit`.execute(db);
  await sql`
    alter function herald_webhook_fan_out(integer, text, double precision, text) reset plan_cache_mode
  `.execute(db);
  await sql`drop function herald_webhook_grow_slots(text, text, integer, integer)`.execute(db);
  await sql`
    drop function herald_webhook_claim(text[], text[], text[], text[], boolean, integer, text, double precision)
  `.execute(db);
}
