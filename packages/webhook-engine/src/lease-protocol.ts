/**
 * The lease protocol: how any number of dispatchers share webhook deliveries without losing one or
 * attempting one twice at the same time. Every statement that changes a delivery is here, next to this
 * design: the four steps below in this file, and the changes made by hand (replays, the test send, an
 * ordering change) in the modules of lease-protocol/ that this file re-exports (see "Outside the four
 * steps" for the list and their entry points). packages/db only reads deliveries.
 *
 * State lives in `webhook_deliveries` only. A PENDING delivery is free, or held through its lease
 * (`lease_token`, `leased_until`):
 *
 *   q:<uuid>  queued: a work entry naming the delivery and this token sits in the Redis stream.
 *   a:<uuid>  attempting: a dispatcher has claimed it and a POST may be in flight.
 *
 * A lease whose `leased_until` has passed is as good as none: its holder is presumed dead. Both lease
 * lengths are `WEBHOOK_TIMEOUT_MS × 1.5` (at least +1 s), so a crash at any step is recovered within
 * that bound plus one scheduler pass.
 *
 * 1. fan-out ({@link fanOutOutbox}), one statement per batch: takes the oldest events still to fan out
 *    (their rows in `webhook_outbox_pending`, deleted; `skip locked`), reads them from the outbox and
 *    inserts one delivery per subscribed endpoint, already
 *    queued (q-lease, one token per batch). A disabled endpoint gets a SKIPPED delivery instead; an
 *    event with `target_endpoint_id` goes to that endpoint only, `exclude_endpoint_id` never gets it.
 *    An endpoint with a `filter` gets the event only when the body contains it (`jsonb @>`), and a
 *    filtered-out event makes no row for it at all (not even SKIPPED); the body is parsed only for
 *    such endpoints (every body is JSON by construction: `JSON.stringify` or `json_build_object`).
 *    The caller then XADDs one entry per endpoint of the batch (naming up to 100 deliveries: per-batch,
 *    not per-delivery, stream work). Killed before the XADD: the q-lease expires and
 *    step 2 hands the deliveries out.
 * 2. due scan ({@link queueDueDeliveries}): PENDING, due, free deliveries, earliest first, through the
 *    partial index on `next_attempt_at` with a LIMIT (a pass costs the same with 100 or 100,000
 *    retries waiting), get a fresh q-lease and are XADDed. Retries, replays, released and abandoned
 *    deliveries all come back this way.
 * 3. claim ({@link claimDeliveries}), one call per batch (a function: transaction-scoped advisory
 *    locks on the batch's endpoints, taken in a fixed order, then one statement): a delivery named by a work entry is
 *    claimed when it is still PENDING and due and its lease is the entry's q-lease or expired. The
 *    per-endpoint cap counts the other lanes' live slots (see "Slots") in the same fresh snapshot
 *    the locks guarantee, so two dispatchers never exceed it together; the claim registers what it
 *    took as its own slots. Deliveries over the cap keep their q-lease; those of a
 *    paused endpoint are freed and moved to `paused_until`; those of a disabled or deleted endpoint
 *    become SKIPPED. A dispatcher whose attempt finished claims the endpoint's next due deliveries
 *    the same way ("chaining"), q-leased and free ones included, without a round through the stream:
 *    one lane per endpoint per dispatcher does this, so a busy endpoint's slots stay busy.
 * 4. record ({@link recordOutcomes}), one statement per batch: records every attempt, and sets each
 *    delivery's next state only where its lease is still the claim's a-lease. A replay (or a takeover
 *    after expiry) changed the lease, so a late record never overwrites it. The same statement
 *    updates endpoint health (failure streak, pause, disable) and writes the operational events
 *    (`webhook.endpoint.disabled`, `webhook.delivery.dead`) to the outbox, atomically: their bodies
 *    are built and checked against the event catalog before the statement, which writes those of its
 *    changes that stand (a body the catalog refuses is reported, and its change made without it). With a
 *    hand-over (a lane's record) it also takes the endpoint's next due deliveries under the lane's
 *    a-lease, without an advisory lock: taking deliveries is not taking slots; step 3's update
 *    re-checks each row it takes, so a claim never overwrites a hand-over's lease. While an endpoint
 *    has work, a batch costs one statement.
 *
 * Work entries are hints: a lost, duplicated or reclaimed entry delays a delivery or claims nothing.
 *
 * Outside the four steps. Every other change to a delivery, and who calls it:
 * - replay of one delivery ({@link replayWebhookDelivery}, lease-protocol/replay.ts; GraphQL
 *   `replayWebhookDelivery`), whatever its state: PENDING with a fresh retry horizon, its lease cleared
 *   (so a record of an attempt in flight no longer matches it, see step 4), due now or, for a FIFO
 *   endpoint, at the back of its line ({@link replayedLinePlace}, see "FIFO endpoints").
 * - replay of dead letters ({@link replayDeadLetters}, same file), the one path of both GraphQL
 *   `replayDeadWebhookDeliveries` (an endpoint's) and `pnpm dlq replay` (apps/webhook-dispatcher
 *   dlq-cli.ts: ids, or all): the same per DEAD delivery, in pages of {@link DEAD_LETTER_REPLAY_PAGE},
 *   each one statement in its own transaction, oldest `seq` first; it walks forwards up to the highest
 *   `seq` DEAD when it started, so it ends, and visits each delivery once.
 * - test send ({@link insertTestWebhook}, lease-protocol/test-send.ts; GraphQL `sendTestWebhook`): the
 *   only delivery inserted outside step 1, with its `webhook.test` event targeting the endpoint, free
 *   and due now (SKIPPED when the endpoint is disabled); the fan-out finds it there and makes no other.
 *   It has no place in a FIFO line (like a delivery made before the endpoint became FIFO).
 * - ordering ({@link setWebhookEndpointOrdering}, lease-protocol/fifo-ordering.ts; GraphQL
 *   `updateWebhookEndpoint`): turning FIFO off makes the deliveries waiting in the line due;
 *   {@link releaseWebhookFifoLines} (run by retention.ts's pass) makes due whatever that left waiting.
 * - an operator's disable ({@link disableWebhookEndpoint}, lease-protocol/operational-events.ts; GraphQL
 *   `disableWebhookEndpoint`): the endpoint's state only (the claim then makes its deliveries SKIPPED),
 *   with the `webhook.endpoint.disabled` event step 4 writes when an endpoint disables itself: both
 *   bodies, and `webhook.delivery.dead`'s, come from that file's builders and its catalog check.
 * - giving up ({@link giveUpWebhookDelivery}, lease-protocol/give-up.ts; GraphQL `giveUpWebhookDelivery`): a
 *   PENDING delivery that was attempted and has no attempt in flight becomes DEAD now, its lease cleared,
 *   with its `webhook.delivery.dead` event; a FIFO line's next delivery is then its head.
 * - dead-letter stream ({@link markDeadLettersStreamed}, lease-protocol/dead-letter-stream.ts;
 *   attempt-batch.ts and dead-letters.ts): `dead_letter_streamed_at` only, on DEAD deliveries.
 * - lost stream ({@link releaseQueuedDeliveries}, in this file; scheduler.ts): frees every q-lease.
 * Deleting a row is not a change of state, and only retention.ts does it: SUCCEEDED and SKIPPED
 * deliveries past the retention, deliveries of deleted endpoints (none being attempted) and DEAD ones
 * whose endpoint row is gone, each with its attempts, in batches.
 *
 * Slots. The cap is counted in `webhook_endpoint_slots`, one row per lane (endpoint, a-lease): how
 * many POSTs the lane may have in flight, live until its `leased_until`. Claims (step 3) and step 3b
 * add up the other lanes' live rows under the endpoint's advisory lock, so the sum of all lanes'
 * slots never exceeds the cap; only they raise a lane's slots. Everything else only lowers them or
 * renews them: every record of a lane sets its row to at most what the lane still holds (in flight
 * or ahead, plus what the record took), so a lane that runs out of work gives its slots back in the
 * same statement; the records that renew the lane's leases (once they have aged) renew the row with
 * them, and the records between write it only to lower it (otherwise they read it: no row version).
 * A dead lane's row stops counting `lease` after its last renewal, as its deliveries' a-leases do.
 * A lane starts POSTs only while those leases are fresh, so never past its row's. A record without
 * a hand-over (a batch, not a lane) gives back one slot per outcome. Rows at 0 slots or past their
 * lease are deleted by the next claim (or step 3b) that finds work on the endpoint, those a minute
 * past their lease also by retention.
 * Claims lock only such rows, and skip any being changed (counting it): a record locks its deliveries
 * before its registration, so a claim that waited for a registration could deadlock with it.
 * Counting slots, not a-leased rows, keeps `lease_token` out of every index, so a claim or hand-over
 * (which changes only the lease) is a HOT update: no new index entries, about a third of PostgreSQL's
 * work per delivery less (see the migration `webhook-endpoint-slots`).
 *
 * Lanes (endpoint-lanes.ts). A dispatcher runs each busy endpoint as a lane with its own a-lease: it
 * claims (step 3), which gives it its slots, at most the cap minus the others' live slots; then
 * each slot POSTs one delivery after another without waiting for the database, and the outcomes are
 * recorded in coalesced statements (step 4, one in flight per lane) that also take the endpoint's next
 * due deliveries under the same a-lease ("hold ahead", up to 20 times its slots). A lane never runs
 * more POSTs than its row says: its slots only ever come from a claim or from step 3b (under the
 * claim's lock, up to `cap − others' live slots`), and each record lowers them with its row. Held-ahead
 * deliveries are a-leased (no one else attempts them) but take no slot, so another dispatcher may
 * claim whatever slots a lane does not use. A lane starts a POST only while its
 * leases, taken or renewed at most `(lease − WEBHOOK_TIMEOUT_MS) / 2` ago by its own clock, outlive
 * the attempt; a record renews them halfway there. The crash bound is unchanged: a dead lane's rows
 * are free `lease` after their last renewal. A replay clears the lease, so the renewal, the record and
 * the lane all leave a replayed delivery alone. On a failed attempt, or a stop, a lane lets its held
 * rows go (lease cleared: the due scan, or a claim's chain, hands them out again) and records what
 * is in flight; a failing, paused or disabled endpoint thus goes through step 3 again.
 *
 * Attempts. A record that sets a delivery SUCCEEDED keeps the successful attempt on the delivery row
 * (`succeeded_at`, `success_*`, in the same row version); every other attempt, and a success recorded
 * after its lease was lost, is a row of `webhook_attempts`. That spares a first-attempt success a row
 * version and two index entries (the migration `webhook-success-folded`). Readers list both through
 * the view `webhook_attempt_log`; a replay moves the folded success into `webhook_attempts` first.
 *
 * Throttles. An endpoint's rate limit (endpoint-rate.ts) and its organisation's attempts in flight
 * across dispatchers (org-permits.ts) are checked by the lane right before each POST, like the slots.
 * A lane held back by either starts nothing and keeps what it holds: its records go on renewing the
 * a-leases (held back by a rate, it is woken at least once a second; waiting for a permit, when one is
 * handed to it, and its renewal then finds out whatever lapsed meanwhile), so a wait changes no row,
 * counts no attempt and never fails or kills a delivery; a lease that lapsed while it waited, or a
 * dispatcher that dies, leaves the deliveries to come back through step 2, as with any crash. No
 * statement here knows about either throttle.
 *
 * FIFO endpoints (`ordering = 'FIFO'`, docs/webhooks.md "Ordered endpoints"). Each of the endpoint's
 * deliveries has a place in its line, `fifo_seq`: its event's outbox `seq` (fan-out), or on a replay a
 * fresh value of that sequence (the back of the line; a replay never cuts in ahead of deliveries already
 * waiting, so a lane holding the line's next ones never has to give them back). The line is the
 * endpoint's PENDING deliveries by `fifo_seq` (partial index `webhook_deliveries_fifo_line_idx`); its
 * head is the first. Outbox `seq` is commit order within an organisation that has a FIFO endpoint: its
 * publishes, an operator's disable and replays take its ordering lock (@herald/db `orgOrderLock`) after
 * their row locks and before drawing a `seq`, and hold it to their commit; step 4's operational events
 * do not (see docs/webhooks.md). Only the head is attempted, and only when no event of the organisation with a
 * lower outbox `seq` is still waiting for its fan-out (a row in `webhook_outbox_pending`; one whose fan-out has not committed could
 * otherwise be overtaken by a later one another dispatcher fanned out first). The rest wait with no
 * `next_attempt_at`, so the due scan's index does not see them (a stuck head with 100,000 behind it
 * costs the due scan nothing); a head has one only while a retry or a pause is scheduled.
 * - fan-out: a FIFO endpoint's new deliveries wait (`next_attempt_at` null), q-leased and XADDed as
 *   usual: the entry naming the head claims it; the others' entries claim nothing.
 * - claim (step 3): a FIFO endpoint's cap is 1, whatever the configured cap, counted in slots as any
 *   cap is (at most one lane has a slot, so one POST is in flight across all dispatchers); a candidate
 *   that is not the head ("behind") is neither claimed nor moved by a pause. A lane that knows its
 *   endpoint is FIFO chains the head of the line (waiting or due) instead of the earliest due ones;
 *   step 3b never raises a FIFO lane past one slot.
 * - hand-over (step 4, `HandOver.fifo`): the lane takes the line behind what it holds, in order, up
 *   to the first delivery it may not take (held by another lease, a retry due later, a row locked by
 *   someone else, or behind an event not yet fanned out), never past it. A lane POSTs what it holds
 *   one after another without waiting for the record of the one before: a success starts the next
 *   at once, so a fast receiver gets the backlog back to back. A failure winds the lane down before
 *   anything else starts (its held deliveries are let go, still waiting, still in line), the head
 *   keeps its place with its retry due later, and nothing behind it is due. A head recorded DEAD lets
 *   the next one be the head: the lane's next claim chains it.
 * - due scan (step 2): besides due deliveries, the heads of enabled FIFO endpoints that wait in line
 *   with no live lease (the dispatcher that would have chained them died, or a replay made a line of
 *   one): one index probe per FIFO endpoint per pass, through `webhook_endpoints_fifo_idx`.
 * A killed lane's held deliveries come back, still in line, when their a-leases expire; the head is
 * then attempted again, and with it the ones behind that were POSTed but not recorded: the receiver
 * may get a few again, in order, never one out of order. Deliveries made before an endpoint became
 * FIFO have no place in the line (attempted one at a time, unordered); turning FIFO off makes every
 * waiting delivery due (lease-protocol/fifo-ordering.ts).
 *
 * Commits. Every statement here commits asynchronously (`synchronous_commit = off` for its own
 * transaction): its effects are visible to every other dispatcher at once, so an endpoint's slots are
 * free again as soon as a batch is recorded, and the relay does not wait ~1–5 ms for a WAL flush per
 * fan-out, while the slots and the relay would sit idle. Durability comes after, from {@link flushCommits}: one synchronous commit that
 * flushes the WAL up to itself, shared by every batch recorded before it. Work entries are
 * acknowledged, dead letters streamed and outbox events relayed only after that barrier; a record of
 * successes that carries none of these does not wait for it. A dispatcher crash loses
 * nothing (the commits are in PostgreSQL); a PostgreSQL crash may forget the fan-outs, claims and
 * records of the last moments before the barrier, which only means those events are fanned out again
 * (new delivery rows; entries naming the forgotten ones claim nothing) or those deliveries attempted
 * again: delivery is at least once, and nothing is lost.
 *
 * Keys. No foreign key guards these tables (the migration `webhook-hot-path-without-foreign-keys`):
 * each would cost a look-up and a WAL-logged lock of the parent row per delivery or attempt written.
 * Endpoints are soft-deleted and purged by retention after their deliveries (and those deliveries'
 * attempts) are gone; an outbox event is deleted only once no delivery refers to it. A delivery whose
 * endpoint row or event is missing anyway (deleted by hand) is made SKIPPED by the claim that names it,
 * and retention purges DEAD ones whose endpoint is gone.
 *
 * Plans. The statements are prepared (planned once per connection): from the sixth execution on,
 * PostgreSQL runs a generic plan made from the table sizes of that moment, and keeps it until the
 * next ANALYZE. Made while the tables were new and small, a join of the input arrays on
 * `webhook_deliveries` would hash a sequential scan of the table, whose cost then grows with every
 * delivery made since (a new schema at 1,000 deliveries/s: ~450 µs of PostgreSQL CPU per delivery).
 * So every input array is read through `limit <its length>`: no row changes, but the planner, not
 * knowing the parameter, assumes a handful of rows and looks each one up by its key, which is right
 * at any table size.
 */
import {
  WEBHOOK_DELIVERY_DEAD_EVENT,
  WEBHOOK_DELIVERY_ID_PREFIX,
  WEBHOOK_ENDPOINT_DISABLED_EVENT,
} from '@herald/contracts';
import { type Database, InvalidWebhookEventError } from '@herald/db';
import { type Kysely, type RawBuilder, sql } from 'kysely';
import {
  checkedOperationalEvent,
  deliveryDeadEvent,
  endpointDisabledEvent,
  type OperationalEvent,
} from './lease-protocol/operational-events.js';

export * from './lease-protocol/dead-letter-stream.js';
export * from './lease-protocol/fifo-ordering.js';
export * from './lease-protocol/give-up.js';
export * from './lease-protocol/operational-events.js';
export * from './lease-protocol/replay.js';
export * from './lease-protocol/test-send.js';

export const QUEUED_LEASE_PREFIX = 'q:';
/** Why the record disables an endpoint whose receiver answered 410 (`disabled_reason`, and its event's). */
export const GONE_REASON = 'the receiver answered 410 Gone';
export const ATTEMPT_LEASE_PREFIX = 'a:';

/** `x` milliseconds as a PostgreSQL interval expression. */
const ms = (value: number) => sql`(${value}::double precision * interval '1 millisecond')`;

export const newLease = (prefix: string) => `${prefix}${crypto.randomUUID()}`;

/** A delivery handed to the stream: what a work entry carries. */
export interface QueuedDelivery {
  deliveryId: string;
  endpointId: string;
  /** The q-lease the entry must present to claim the delivery. */
  lease: string;
}

export interface FanOutResult {
  /** Outbox events dispatched by this pass. */
  events: number;
  /** New PENDING deliveries, queued under a q-lease; the caller XADDs them. */
  queued: QueuedDelivery[];
  /** New SKIPPED deliveries (disabled endpoints). */
  skipped: number;
  /**
   * The stored `traceparent`s of the events whose publishing operation was sampled (for the pass's span
   * links; the others lead to no recorded trace, and at a ratio of 0.01 they are 99 % of the batch).
   */
  traceparents: string[];
}

/**
 * Step 1: outbox events become their deliveries, in one statement: the function `herald_webhook_fan_out`,
 * whose SQL is in the migration "webhook-outbox-pending" (a function, for planner settings that keep
 * the batch's read bounded whatever the tables' statistics; changing how events match endpoints is a new
 * migration that replaces it).
 */
export async function fanOutOutbox(
  db: Kysely<Database>,
  options: { limit: number; queueLeaseMs: number },
): Promise<FanOutResult> {
  const lease = newLease(QUEUED_LEASE_PREFIX);
  const { rows } = await sql<{
    events: number | null;
    traceparents: string[] | null;
    id: string | null;
    endpoint_id: string | null;
    status: string | null;
  }>`
    select events, traceparents, id, endpoint_id, status
    from herald_webhook_fan_out(${options.limit}, ${lease}, ${options.queueLeaseMs}, ${WEBHOOK_DELIVERY_ID_PREFIX})
  `.execute(db);
  const queued: QueuedDelivery[] = [];
  let skipped = 0;
  let counted: { events: number; traceparents: string[] | null } | undefined;
  for (const row of rows) {
    if (row.events !== null) counted = { events: row.events, traceparents: row.traceparents };
    if (!row.id || !row.endpoint_id) continue;
    if (row.status === 'PENDING') queued.push({ deliveryId: row.id, endpointId: row.endpoint_id, lease });
    else skipped++;
  }
  return { events: counted?.events ?? 0, queued, skipped, traceparents: counted?.traceparents ?? [] };
}

/** Step 2: due, free deliveries get a q-lease, earliest due first, through the index with a LIMIT. */
export async function queueDueDeliveries(
  db: Kysely<Database>,
  options: { limit: number; queueLeaseMs: number },
): Promise<QueuedDelivery[]> {
  const lease = newLease(QUEUED_LEASE_PREFIX);
  const { rows } = await sql<{ id: string; endpoint_id: string }>`
    with earliest as (
      select id from webhook_deliveries
      where status = 'PENDING' and next_attempt_at <= now() and (leased_until is null or leased_until <= now())
      order by next_attempt_at
      limit ${options.limit}
      for update skip locked
    ), head as (
      -- FIFO endpoints' heads waiting in line with nobody on them (see "FIFO endpoints"): not locked
      -- here (a lock that skipped the head would hand out the one behind it), re-checked below.
      select line.id from webhook_endpoints endpoint
      cross join lateral (
        select id, next_attempt_at, leased_until from webhook_deliveries
        where endpoint_id = endpoint.id and status = 'PENDING' and fifo_seq is not null
        order by fifo_seq limit 1
      ) line
      where endpoint.ordering = 'FIFO' and endpoint.deleted_at is null and endpoint.status = 'ENABLED'
        and line.next_attempt_at is null and (line.leased_until is null or line.leased_until <= now())
      limit ${options.limit}
    )
    update webhook_deliveries delivery
    set lease_token = ${lease}, leased_until = now() + ${ms(options.queueLeaseMs)}
    from (select id from earliest union select id from head) due
    where delivery.id = due.id and delivery.status = 'PENDING'
      and (delivery.leased_until is null or delivery.leased_until <= now())
    returning delivery.id, delivery.endpoint_id, set_config('synchronous_commit', 'off', true) as async_commit
  `.execute(db);
  return rows.map((row) => ({ deliveryId: row.id, endpointId: row.endpoint_id, lease }));
}

/** A delivery claimed for one attempt, with everything the attempt needs. */
export interface ClaimedDelivery {
  id: string;
  eventId: string;
  eventType: string;
  orgId: string;
  endpointId: string;
  url: string;
  /** The exact JSON body to sign and send. */
  body: string;
  /** Signing secrets in use, newest first, sealed (`secret-cache.ts` opens them before signing). */
  secrets: string[];
  /** Attempts made before this one. */
  attemptCount: number;
  /** Milliseconds since the retry horizon started (creation or last replay), by the database clock. */
  ageMs: number;
  /** The a-lease that {@link recordOutcomes} must present. */
  lease: string;
  /** The endpoint's `rate_limit_per_second` when claimed (null or absent: none); endpoint-rate.ts applies it. */
  rateLimitPerSecond?: number | null;
  /** The endpoint is FIFO: one attempt at a time, in line order (see "FIFO endpoints"). */
  fifo?: boolean;
  /**
   * The W3C `traceparent` stored with the event by the operation that published it (null when tracing
   * was off there): the attempt's span joins that trace. Read from the outbox row the claim joins for
   * the body anyway, so deliveries carry no copy of it.
   */
  traceparent?: string | null;
}

export interface ClaimRequest {
  /** Deliveries named by work entries. */
  queued: readonly QueuedDelivery[];
  /** Endpoints whose next due deliveries to take as well (chaining), up to the cap. */
  chainEndpoints?: readonly string[];
  /** At most this many attempts in flight per endpoint, across all dispatchers. */
  endpointCap: number;
  /** How long the attempt may take before another dispatcher may take the delivery over. */
  leaseMs: number;
  /** The a-lease to take the deliveries under (a lane's own, see step 4). @default a new one */
  lease?: string;
  /**
   * The chain endpoints are FIFO (a lane learns it from its deliveries): chain the head of each one's
   * line instead of the earliest due deliveries. A wrong guess only delays: the claim still takes a
   * FIFO endpoint's head alone. @default false
   */
  fifo?: boolean;
}

/** What a claimed delivery carries of its own (the rest is its endpoint's). */
type DeliveryFields = Pick<
  ClaimedDelivery,
  'id' | 'eventId' | 'eventType' | 'orgId' | 'endpointId' | 'body' | 'attemptCount' | 'ageMs'
> & { traceparent: string | null };

/**
 * Every {@link ClaimedDelivery} is made here, a claim's and a hand-over's alike, field by field in one
 * order: the signing and sending path then sees objects of one shape. (A hand-over that spread its
 * parsed row, `{ ...delivery, url, … }`, and a claim with a conditional spread inside its literal made two
 * shapes; built here the dispatcher spent a median 14–16 % less CPU per delivery in ten alternating pairs
 * of bench/micro/dispatch-cpu.ts, bench/results/webhooks-a40a0a2/.)
 */
function claimedDelivery(
  delivery: DeliveryFields,
  endpoint: { url: string; secrets: string[]; rateLimitPerSecond: number | null; fifo: boolean },
  lease: string,
): ClaimedDelivery {
  const claimed: ClaimedDelivery = {
    id: delivery.id,
    eventId: delivery.eventId,
    eventType: delivery.eventType,
    orgId: delivery.orgId,
    endpointId: delivery.endpointId,
    url: endpoint.url,
    body: delivery.body,
    secrets: endpoint.secrets,
    attemptCount: delivery.attemptCount,
    ageMs: Number(delivery.ageMs),
    lease,
    rateLimitPerSecond: endpoint.rateLimitPerSecond,
    traceparent: delivery.traceparent,
  };
  if (endpoint.fifo) claimed.fifo = true;
  return claimed;
}

/**
 * Step 3: claims a batch in one call, the per-endpoint cap enforced atomically: the function
 * `herald_webhook_claim` (migration "webhook-claim-functions") takes the endpoints' advisory locks, then
 * claims in a statement of its own, whose snapshot sees what the locks' previous holders committed. One
 * round trip (a transaction of BEGIN, the locks, the claim and COMMIT was four).
 */
export async function claimDeliveries(db: Kysely<Database>, request: ClaimRequest): Promise<ClaimedDelivery[]> {
  const chain = [...new Set(request.chainEndpoints ?? [])];
  const endpoints = [...new Set([...request.queued.map((item) => item.endpointId), ...chain])].sort();
  if (endpoints.length === 0) return [];
  const lease = request.lease ?? newLease(ATTEMPT_LEASE_PREFIX);
  const ids = request.queued.map((item) => item.deliveryId);
  const leases = request.queued.map((item) => item.lease);
  // The chain's deliveries (`fifo`): a FIFO endpoint's head of its line, or any endpoint's earliest due ones.
  const { rows } = await sql<{
    id: string;
    event_id: string;
    event_type: string;
    org_id: string;
    endpoint_id: string;
    attempt_count: number;
    age_ms: number;
    url: string;
    rate_limit_per_second: number | null;
    fifo: boolean;
    body: string;
    secrets: string[] | null;
    traceparent: string | null;
  }>`
    select id, event_id, event_type, org_id, endpoint_id, attempt_count, url, rate_limit_per_second, fifo, body,
      traceparent, age_ms, secrets
    from herald_webhook_claim(${endpoints}::text[], ${ids}::text[], ${leases}::text[], ${chain}::text[],
      ${request.fifo === true}::boolean, ${request.endpointCap}::int, ${lease}::text, ${request.leaseMs}::double precision)
    order by fifo_seq, id
  `.execute(db);
  return rows.map((row) =>
    claimedDelivery(
      {
        id: row.id,
        eventId: row.event_id,
        eventType: row.event_type,
        orgId: row.org_id,
        endpointId: row.endpoint_id,
        body: row.body,
        attemptCount: row.attempt_count,
        ageMs: row.age_ms,
        traceparent: row.traceparent,
      },
      { url: row.url, secrets: row.secrets ?? [], rateLimitPerSecond: row.rate_limit_per_second, fifo: row.fifo },
      lease,
    ),
  );
}

/**
 * Step 3b, for a lane that runs fewer slots than the cap (its claim found fewer due deliveries, or
 * others held some): under the same advisory lock as a claim, adds up the others' live slots and
 * raises the lane's own registration to `min(cap − others, want)` (never lowers it). Returns the
 * lane's slots now, null when its registration is no longer live (it has lost its slots: its leases
 * were not renewed in time), and the others' slots. One call: the function `herald_webhook_grow_slots`.
 */
export async function growEndpointSlots(
  db: Kysely<Database>,
  request: { endpointId: string; lease: string; want: number; endpointCap: number },
): Promise<{ slots: number | null; others: number }> {
  const { rows } = await sql<{ slots: number | null; others: number }>`
    select slots, others
    from herald_webhook_grow_slots(${request.endpointId}::text, ${request.lease}::text, ${request.want}::int,
      ${request.endpointCap}::int)
  `.execute(db);
  return rows[0] ?? { slots: null, others: 0 };
}

/** What happens to a delivery after an attempt. */
export type DeliveryNext = { status: 'SUCCEEDED' } | { status: 'PENDING'; retryInMs: number } | { status: 'DEAD' };

/** One attempt's outcome, as recorded. */
export interface AttemptOutcome {
  deliveryId: string;
  endpointId: string;
  /** The event the delivery carries (`evt_…`) and its type: what a `webhook.delivery.dead` body names. */
  eventId: string;
  eventType: string;
  /** This attempt's number, 1 for the first: a dead delivery's `attempts`. */
  attempt: number;
  /** The URL attempted: a `webhook.endpoint.disabled` body's `url`. */
  url: string;
  /** The a-lease of the claim. */
  lease: string;
  at: Date;
  statusCode: number | null;
  durationMs: number;
  error: string | null;
  /** The first bytes of the receiver's answer (valid UTF-8, bounded by the caller). */
  responseBody: string | null;
  next: DeliveryNext;
  /**
   * How this attempt counts for endpoint health: `success`, `failure` (the streak towards
   * `WEBHOOK_DISABLE_AFTER`), `gone` (410: disable at once), or `throttled` (429/503 with Retry-After:
   * pause the endpoint for `pauseMs`, not a failure).
   */
  health: 'success' | 'failure' | 'gone' | 'throttled';
  pauseMs?: number;
}

export interface RecordResult {
  /** Deliveries whose state this record set (their lease was still the claim's). */
  recorded: Set<string>;
  /** With `handOver`: the endpoint's next due deliveries, claimed under the hand-over's a-lease. */
  handedOver: ClaimedDelivery[];
  /** With `handOver.renew`: those of them still held under the lease (the others were replayed or taken over). */
  kept: Set<string>;
  /** With `handOver.url`: the endpoint is disabled, deleted or paused, or its URL changed. */
  halt: boolean;
  /** Endpoints disabled by this record (410, or failing for `disableAfterMs`). */
  disabled: Array<{ endpointId: string; reason: string }>;
  /** Operational events written to the outbox. */
  events: number;
  /**
   * Operational events this record would have written (an endpoint it disabled, a delivery it recorded
   * DEAD) whose body did not match the event catalog: a bug, to be logged and counted. The change
   * stands; the event is not written.
   */
  invalidEvents: InvalidWebhookEventError[];
  /**
   * With `handOver`: the lane's registered slots after this record (see {@link HandOver.slots}); null
   * when its registration was no longer live (its slots are lost: it must start no more POSTs).
   */
  slots: number | null;
}

/** What a record does with an endpoint's deliveries besides recording (step 4; see "Lanes" above). */
export interface HandOver {
  endpointId: string;
  leaseMs: number;
  /**
   * The a-lease to take deliveries under, that `renew` and `release` act on, and whose slot
   * registration this record keeps up to date. @default the outcomes' lease (they must share one)
   */
  lease?: string;
  /**
   * The lane's slots now. The registration is set to the least of its slots, this, and `keep` plus
   * the deliveries this record takes (a lane never needs more slots than it holds deliveries), and
   * renewed (`leaseMs` from now) when lowered or with `renewSlots`. @default no bound besides those
   */
  slots?: number;
  /**
   * Deliveries the caller still holds under the lease besides the outcomes recorded here and what it
   * releases (POSTs in flight, deliveries held ahead). @default 0: a batch records all it held at once
   */
  keep?: number;
  /** Deliveries held under `lease` whose lease is renewed (`leaseMs` from now). @default none */
  renew?: readonly string[];
  /** Deliveries held under `lease` to let go (lease cleared; the due scan hands them out again). @default none */
  release?: readonly string[];
  /**
   * The URL the caller's held deliveries go to: `RecordResult.halt` says when the endpoint no longer
   * takes deliveries there (disabled, deleted, paused, or its URL changed).
   */
  url?: string;
  /**
   * How many of the endpoint's next due deliveries to take. @default as many as the recorded
   * deliveries whose a-lease was still live (a batch's hand-over: one for one)
   */
  take?: number;
  /**
   * The endpoint is FIFO (as its deliveries said): take the next deliveries of its line, in order, up
   * to the first one that may not be taken (see "FIFO endpoints"). @default false
   */
  fifo?: boolean;
  /**
   * Renew the lane's slot registration (`leaseMs` from now). A lane renews it when it renews its
   * leases, once they have aged; a record in between writes the registration only when it lowers the
   * slots, and otherwise only reads them (no new row version). @default true
   */
  renewSlots?: boolean;
}

/** A record that changed nothing, to be filled in from the statement's rows. */
function emptyRecordResult(): RecordResult {
  return {
    recorded: new Set(),
    handedOver: [],
    kept: new Set(),
    halt: false,
    disabled: [],
    events: 0,
    invalidEvents: [],
    slots: null,
  };
}

/**
 * Step 4: records a batch's outcomes, endpoint health and operational events in one statement.
 *
 * With `handOver` (the caller's deliveries are one endpoint's and every attempt recorded here
 * succeeded, or `take` is 0), the same statement takes the endpoint's next due deliveries under the
 * lane's a-lease, without an advisory lock: by default as many as the batch's a-leases that were
 * still live; a lane takes more (`take`) to hold them ahead. Taking deliveries takes no slot: the
 * lane's slot row is only lowered to what it holds, and renewed with `renewSlots` (see "Slots").
 * Step 3's claims re-check each row they take, so neither overwrites the other.
 */
export async function recordOutcomes(
  db: Kysely<Database>,
  outcomes: readonly AttemptOutcome[],
  options: { disableAfterMs: number; handOver?: HandOver },
): Promise<RecordResult> {
  const handOver = options.handOver;
  if (outcomes.length === 0 && !handOver) return emptyRecordResult();
  const lease = handOver?.lease ?? outcomes[0]?.lease;
  if (lease === undefined || (handOver && !handOver.lease && outcomes.some((o) => o.lease !== lease))) {
    throw new Error('a hand-over needs the a-lease its slots are registered under: pass handOver.lease');
  }
  const renew = handOver?.renew ?? [];
  const release = handOver?.release ?? [];
  const outcomeIds = outcomes.map((o) => o.deliveryId);
  const health = new Map<
    string,
    { ok: boolean; failed: boolean; gone: boolean; pauseMs: number | null; at: Date; url: string }
  >();
  for (const outcome of outcomes) {
    const entry = health.get(outcome.endpointId) ?? {
      ok: false,
      failed: false,
      gone: false,
      pauseMs: null,
      at: outcome.at,
      url: outcome.url,
    };
    if (outcome.health === 'success') entry.ok = true;
    // The URL a disable would name: the one that answered 410, else one that failed (they differ only
    // when the endpoint's URL was changed while the batch's attempts were in flight).
    if (outcome.health === 'failure') {
      if (!entry.gone) entry.url = outcome.url;
      entry.failed = true;
    }
    if (outcome.health === 'gone') {
      entry.url = outcome.url;
      entry.gone = true;
    }
    if (outcome.health === 'throttled') entry.pauseMs = Math.max(entry.pauseMs ?? 0, outcome.pauseMs ?? 0);
    if (outcome.at < entry.at) entry.at = outcome.at;
    health.set(outcome.endpointId, entry);
  }
  const h = [...health.entries()];
  const disableAfterText = `every attempt failed for ${Math.round(options.disableAfterMs / 1000)} s`;
  // The operational events this record may write, built and checked against the event catalog before
  // the statement: the statement writes those of its changes that stand (see operational-events.ts).
  // A disable's `disabled_at` is `now` too, so the row and its event's `disabledAt` agree: this
  // process's clock, read before the statement (the operator's disable uses the database's).
  const now = new Date();
  const refused = new Map<string, InvalidWebhookEventError>();
  const checked = (key: string, event: OperationalEvent): OperationalEvent | null => {
    const result = checkedOperationalEvent(event);
    if (!(result instanceof InvalidWebhookEventError)) return result;
    refused.set(key, result);
    return null;
  };
  // The statement has only the parts this batch needs (see "Plans" above: each part costs at every
  // execution, if only to set up; a lane's usual record is successes and a hand-over).
  const recording = outcomes.length > 0;
  const allSucceeded = outcomes.every((o) => o.health === 'success');
  const deadEvents: Array<{ deliveryId: string; event: OperationalEvent }> = [];
  for (const o of allSucceeded ? [] : outcomes) {
    if (o.next.status !== 'DEAD') continue;
    const event = checked(
      o.deliveryId,
      deliveryDeadEvent({
        deliveryId: o.deliveryId,
        endpointId: o.endpointId,
        eventId: o.eventId,
        eventType: o.eventType,
        attempts: o.attempt,
        lastError: o.error,
        at: now,
      }),
    );
    if (event) deadEvents.push({ deliveryId: o.deliveryId, event });
  }
  const taking = handOver !== undefined && handOver.take !== 0 && (handOver.take !== undefined || recording);
  const halting = handOver?.url !== undefined;
  const none = sql``;
  /** A success's column on its delivery row: the attempt's value when this record sets SUCCEEDED. */
  const folded = (column: string) => sql`case when input.next_status = 'SUCCEEDED' then ${sql.raw(column)} end`;
  const ctes: RawBuilder<unknown>[] = [];
  if (recording) {
    ctes.push(sql`input as (
      select input.id, input.lease, input.at, input.status_code, input.duration_ms, input.error,
        input.response_body, input.next_status, input.retry_ms, input.n
      from unnest(
        ${outcomes.map((o) => o.deliveryId)}::text[], ${outcomes.map((o) => o.lease)}::text[],
        ${outcomes.map((o) => o.at.toISOString())}::timestamptz[], ${outcomes.map((o) => o.statusCode)}::int[],
        ${outcomes.map((o) => o.durationMs)}::int[], ${outcomes.map((o) => o.error)}::text[],
        ${outcomes.map((o) => o.responseBody)}::text[], ${outcomes.map((o) => o.next.status)}::text[],
        ${outcomes.map((o) => (o.next.status === 'PENDING' ? o.next.retryInMs : null))}::double precision[]
      ) with ordinality as input(id, lease, at, status_code, duration_ms, error, response_body, next_status, retry_ms, n)
      limit ${outcomes.length}
    ), live as (
      -- The batch's deliveries still held under their claim (sizes a batch's default hand-over).
      select delivery.id from input join webhook_deliveries delivery on delivery.id = input.id
      where delivery.lease_token = input.lease and delivery.leased_until > now()
    ), updated as (
      update webhook_deliveries delivery
      set status = input.next_status,
        attempt_count = delivery.attempt_count + 1,
        next_attempt_at = now() + input.retry_ms * interval '1 millisecond',
        lease_token = null, leased_until = null, updated_at = now(),
        succeeded_at = ${folded('input.at')}, success_status_code = ${folded('input.status_code')},
        success_duration_ms = ${folded('input.duration_ms')}, success_response_body = ${folded('input.response_body')}
      from input
      where delivery.id = input.id and delivery.lease_token = input.lease
      returning delivery.id, delivery.status, delivery.endpoint_id, delivery.org_id, input.n
    ), attempt as (
      -- Every attempt but a success the record above kept on its delivery (see "Attempts"), told apart by
      -- its input row (two outcomes of one delivery in a batch: the update uses one). Written so that
      -- such a success costs one probe of a hashed list and no look-up of its delivery.
      insert into webhook_attempts (delivery_id, at, status_code, duration_ms, error, response_body)
      select input.id, input.at, input.status_code, input.duration_ms, input.error, input.response_body
      from input
      where (input.next_status <> 'SUCCEEDED' or input.n not in (select updated.n from updated))
        and exists (select 1 from webhook_deliveries delivery where delivery.id = input.id)
    )`);
  }
  if (recording && allSucceeded) {
    // Successes only: they end a failure streak, and can neither pause nor disable.
    ctes.push(sql`health as (
      update webhook_endpoints endpoint set failing_since = null
      from (select id from unnest(${h.map(([id]) => id)}::text[]) as health(id) limit ${h.length}) health
      where endpoint.id = health.id and endpoint.failing_since is not null
      returning endpoint.id
    )`);
  } else if (recording) {
    // Each endpoint this record may disable (410, or failing) gets its reason and its
    // `webhook.endpoint.disabled` event here, written only if the record disables it.
    const disabling = h.map(([endpointId, e]) => {
      const reason = e.gone ? GONE_REASON : !e.ok && e.failed ? disableAfterText : null;
      const event =
        reason === null
          ? null
          : checked(endpointId, endpointDisabledEvent({ endpointId, url: e.url, reason, disabledAt: now }));
      return { reason, event };
    });
    ctes.push(sql`health_input as (
      select health.endpoint_id, health.ok, health.failed, health.gone, health.pause_ms, health.first_failure_at,
        health.reason, health.event_id, health.event_body
      from unnest(
        ${h.map(([id]) => id)}::text[], ${h.map(([, e]) => e.ok)}::boolean[], ${h.map(([, e]) => e.failed)}::boolean[],
        ${h.map(([, e]) => e.gone)}::boolean[], ${h.map(([, e]) => e.pauseMs)}::double precision[],
        ${h.map(([, e]) => e.at.toISOString())}::timestamptz[], ${disabling.map((d) => d.reason)}::text[],
        ${disabling.map((d) => d.event?.id ?? null)}::text[], ${disabling.map((d) => d.event?.body ?? null)}::text[]
      ) as health(endpoint_id, ok, failed, gone, pause_ms, first_failure_at, reason, event_id, event_body)
      limit ${h.length}
    ), verdict as (
      select health.endpoint_id, health.ok, health.failed, health.gone, health.pause_ms, health.first_failure_at,
        health.event_id, health.event_body, case
        when endpoint.status <> 'ENABLED' then null
        when health.gone then health.reason
        when not health.ok and health.failed
          and coalesce(endpoint.failing_since, health.first_failure_at) <= now() - ${ms(options.disableAfterMs)}
          then health.reason
        end as reason
      from health_input health join webhook_endpoints endpoint on endpoint.id = health.endpoint_id
    ), health as (
      update webhook_endpoints endpoint
      set failing_since = case
          when verdict.ok then null
          when verdict.failed or verdict.gone then coalesce(endpoint.failing_since, verdict.first_failure_at)
          else endpoint.failing_since end,
        paused_until = case when verdict.pause_ms is null then endpoint.paused_until
          else greatest(endpoint.paused_until, now() + verdict.pause_ms * interval '1 millisecond') end,
        status = case when verdict.reason is not null then 'DISABLED' else endpoint.status end,
        disabled_at = case when verdict.reason is not null then ${now.toISOString()}::timestamptz
          else endpoint.disabled_at end,
        disabled_reason = coalesce(verdict.reason, endpoint.disabled_reason)
      from verdict
      where endpoint.id = verdict.endpoint_id
        and (not verdict.ok or endpoint.failing_since is not null)
      returning endpoint.id, endpoint.org_id, verdict.reason as disabled_now, verdict.event_id, verdict.event_body
    ), disabled_event as (
      insert into webhook_outbox (id, org_id, type, body, exclude_endpoint_id)
      select event.event_id, event.org_id, ${WEBHOOK_ENDPOINT_DISABLED_EVENT}::text, event.event_body, event.id
      from health event where event.disabled_now is not null and event.event_body is not null
      returning id
    )`);
  }
  if (deadEvents.length > 0) {
    // Each delivery recorded DEAD gets its `webhook.delivery.dead` event here (written if the record stands).
    ctes.push(sql`dead_event as (
      insert into webhook_outbox (id, org_id, type, body, exclude_endpoint_id)
      select dead.event_id, event.org_id, ${WEBHOOK_DELIVERY_DEAD_EVENT}::text, dead.body, event.endpoint_id
      from updated event
      join (
        select dead.delivery_id, dead.event_id, dead.body
        from unnest(${deadEvents.map((d) => d.deliveryId)}::text[], ${deadEvents.map((d) => d.event.id)}::text[],
          ${deadEvents.map((d) => d.event.body)}::text[]) as dead(delivery_id, event_id, body)
        limit ${deadEvents.length}
      ) dead on dead.delivery_id = event.id
      where event.status = 'DEAD'
      returning id
    )`);
  }
  if (renew.length > 0) {
    ctes.push(sql`renewed as (
      update webhook_deliveries delivery set leased_until = now() + ${ms(handOver?.leaseMs ?? 0)}
      from (select id from unnest(${renew}::text[]) as held(id) limit ${renew.length}) held
      where delivery.id = held.id and delivery.status = 'PENDING' and delivery.lease_token = ${lease}
      returning delivery.id
    )`);
  }
  if (release.length > 0) {
    ctes.push(sql`let_go as (
      update webhook_deliveries delivery set lease_token = null, leased_until = null
      from (select id from unnest(${release}::text[]) as held(id) limit ${release.length}) held
      where delivery.id = held.id and delivery.status = 'PENDING' and delivery.lease_token = ${lease}
      returning delivery.id
    )`);
  }
  if (taking) {
    const take =
      handOver?.take !== undefined
        ? sql`${handOver.take}::int`
        : sql`(select count(1) from updated where updated.id in (select id from live))`;
    const endpointId = sql`${handOver?.endpointId ?? null}::text`;
    ctes.push(
      handOver?.fifo
        ? sql`line as (
      -- A FIFO endpoint's line behind what the lane holds, in order (see "FIFO endpoints"): taken up to
      -- the first delivery it may not take (held by another, due later, locked, or behind an event of
      -- the organisation not fanned out yet), never past it.
      select next.id, next.fifo_seq,
        coalesce(next.next_attempt_at <= now(), true)
          and (next.leased_until is null or next.leased_until <= now() or next.lease_token like 'q:%') as free
      from webhook_deliveries next
      where next.endpoint_id = ${endpointId} and next.status = 'PENDING' and next.fifo_seq is not null
        and next.lease_token is distinct from ${lease}
        and exists (
          select 1 from webhook_endpoints endpoint
          where endpoint.id = next.endpoint_id and endpoint.status = 'ENABLED' and endpoint.deleted_at is null
            and not coalesce(endpoint.paused_until > now(), false) and endpoint.ordering = 'FIFO'
        )
      order by next.fifo_seq
      limit ${take}
    ), line_locked as (
      -- Row by row through the primary key. (The status as a parameter: a generic plan made while
      -- the table was small could otherwise walk the partial index of every pending delivery, which
      -- a literal 'PENDING' matches, instead; see "Plans".)
      select locked.id from line
      cross join lateral (
        select next.id from webhook_deliveries next
        where next.id = line.id and next.status = ${'PENDING'}::text
          and (next.leased_until is null or next.leased_until <= now() or next.lease_token like 'q:%')
        for update skip locked
      ) locked
      where line.free
    ), line_taken as (
      select line.id from line
      where line.fifo_seq < coalesce(least(
        (select min(stop.fifo_seq) from line stop where stop.id not in (select id from line_locked)),
        (select min(pending.seq) from webhook_outbox_pending pending
          join webhook_outbox event on event.seq = pending.seq
          where pending.seq < (select max(fifo_seq) from line)
            and event.org_id = (select org_id from webhook_endpoints where id = ${endpointId}))
      ), 9223372036854775807)
    ), handed as (
      select id from line_taken
    )`
        : sql`handed as (
      select next.id from webhook_deliveries next
      where next.endpoint_id = ${endpointId} and next.status = 'PENDING'
        and next.next_attempt_at <= now()
        and (next.leased_until is null or next.leased_until <= now() or next.lease_token like 'q:%')
        and next.id <> all(${outcomeIds}::text[]) and next.id <> all(${renew}::text[])
        and next.id <> all(${release}::text[])
        and exists (
          select 1 from webhook_endpoints endpoint
          where endpoint.id = next.endpoint_id and endpoint.status = 'ENABLED' and endpoint.deleted_at is null
            and not coalesce(endpoint.paused_until > now(), false)
        )
      order by next.next_attempt_at, next.seq
      limit ${take}
      for update skip locked
    )`,
    );
    ctes.push(sql`taken as (
      update webhook_deliveries delivery
      set lease_token = ${lease}, leased_until = now() + ${ms(handOver?.leaseMs ?? 0)}
      from handed where delivery.id = handed.id
      returning delivery.id, delivery.event_id, delivery.event_type, delivery.org_id, delivery.endpoint_id,
        delivery.attempt_count, delivery.horizon_from, delivery.fifo_seq
    )`);
  }
  if (handOver) {
    // The lane's slots (see "Slots" above): never more than it holds, renewed with its leases.
    const holds = taking
      ? sql`${handOver.keep ?? 0}::int + (select count(1) from taken)::int`
      : sql`${handOver.keep ?? 0}::int`;
    const mine = sql`slot.endpoint_id = ${handOver.endpointId}::text and slot.lease = ${lease}::text and slot.leased_until > now()`;
    const lowered = sql`least(slot.slots, ${handOver.slots ?? null}::int, ${holds})`;
    const set = sql`set slots = ${lowered}, leased_until = now() + ${ms(handOver.leaseMs)}`;
    ctes.push(
      handOver.renewSlots === false
        ? sql`slot_lowered as (
      update webhook_endpoint_slots slot ${set}
      where ${mine} and slot.slots > ${lowered}
      returning slot.slots
    ), slotted as (
      select slots from slot_lowered
      union all
      select slot.slots from webhook_endpoint_slots slot where ${mine} and not exists (select 1 from slot_lowered)
    )`
        : sql`slotted as (
      update webhook_endpoint_slots slot ${set}
      where ${mine}
      returning slot.slots
    )`,
    );
  } else if (recording) {
    // A batch recorded without a hand-over gives back the slots its claims registered for it.
    ctes.push(sql`unslotted as (
      update webhook_endpoint_slots slot set slots = greatest(slot.slots - freed.n, 0)
      from (
        select endpoint_id, lease, count(1)::int as n
        from (
          select * from unnest(${outcomes.map((o) => o.endpointId)}::text[], ${outcomes.map((o) => o.lease)}::text[])
            as freed(endpoint_id, lease)
          limit ${outcomes.length}
        ) freed
        group by endpoint_id, lease
      ) freed
      where slot.endpoint_id = freed.endpoint_id and slot.lease = freed.lease
    )`);
  }
  const branches: RawBuilder<unknown>[] = [];
  if (recording) branches.push(sql`select 'recorded' as kind, id, null as reason from updated`);
  if (handOver) branches.push(sql`select 'slots', null, (select slots from slotted)::text`);
  if (renew.length > 0) branches.push(sql`select 'kept', id, null from renewed`);
  if (release.length > 0) branches.push(sql`select 'released', null, (select count(1) from let_go)::text`);
  if (halting) {
    branches.push(sql`select 'halt', null, 'halt' where not exists (
      select 1 from webhook_endpoints endpoint
      where endpoint.id = ${handOver?.endpointId ?? null}::text and endpoint.url = ${handOver?.url ?? null}::text
        and endpoint.status = 'ENABLED' and endpoint.deleted_at is null
        and not coalesce(endpoint.paused_until > now(), false)
    )`);
  }
  if (taking) {
    // The endpoint's URL and secrets once, not once per delivery (they are one endpoint's).
    branches.push(sql`select 'handed', null, (
      select json_build_object('url', endpoint.url, 'rateLimitPerSecond', endpoint.rate_limit_per_second,
        'fifo', endpoint.ordering = 'FIFO',
        'secrets', (select coalesce(array_agg(secret.sealed_secret order by secret.id desc), '{}') from webhook_endpoint_secrets secret
          where secret.endpoint_id = endpoint.id and secret.sealed_secret is not null
            and (secret.expires_at is null or secret.expires_at > now())),
        'deliveries', (
          select json_agg(json_build_object('id', taken.id, 'eventId', taken.event_id, 'eventType', taken.event_type,
            'orgId', taken.org_id, 'endpointId', taken.endpoint_id, 'attemptCount', taken.attempt_count,
            'body', event.body, 'traceparent', event.traceparent,
            'ageMs', extract(epoch from now() - taken.horizon_from) * 1000)
            order by taken.fifo_seq)
          from taken join webhook_outbox event on event.id = taken.event_id
        ))::text
      from webhook_endpoints endpoint
      where endpoint.id = ${handOver?.endpointId ?? null}::text and exists (select 1 from taken)
    )`);
  }
  if (recording && !allSucceeded) {
    branches.push(sql`select 'disabled', id, disabled_now from health where disabled_now is not null`);
  }
  const events = [
    ...(recording && !allSucceeded ? [sql`(select count(1) from disabled_event)`] : []),
    ...(deadEvents.length > 0 ? [sql`(select count(1) from dead_event)`] : []),
  ];
  if (events.length > 0) branches.push(sql`select 'events', null, (${sql.join(events, sql` + `)})::text`);
  // This statement's own transaction commits without waiting for the WAL flush; see "Commits" above.
  branches.push(sql`select 'async', null, set_config('synchronous_commit', 'off', true)`);
  const { rows } = await sql<{
    kind: 'recorded' | 'kept' | 'released' | 'halt' | 'handed' | 'disabled' | 'events' | 'slots';
    id: string | null;
    reason: string | null;
  }>`
    ${ctes.length > 0 ? sql`with ${sql.join(ctes, sql`, `)}` : none}
    select result.kind, result.id, result.reason
    from (${sql.join(branches, sql` union all `)}) as result(kind, id, reason)
  `.execute(db);
  const result = emptyRecordResult();
  for (const row of rows) {
    if (row.kind === 'recorded' && row.id) result.recorded.add(row.id);
    else if (row.kind === 'kept' && row.id) result.kept.add(row.id);
    else if (row.kind === 'halt') result.halt = true;
    else if (row.kind === 'handed' && row.reason) {
      const taken = JSON.parse(row.reason) as {
        url: string;
        rateLimitPerSecond: number | null;
        fifo: boolean;
        secrets: string[];
        deliveries: DeliveryFields[] | null;
      };
      // No delivery when every one taken had lost its outbox event (deleted by hand; the claim that
      // names them once their lease has expired makes them SKIPPED).
      result.handedOver = (taken.deliveries ?? []).map((delivery) => claimedDelivery(delivery, taken, lease));
    } else if (row.kind === 'disabled' && row.id)
      result.disabled.push({ endpointId: row.id, reason: row.reason ?? '' });
    else if (row.kind === 'events') result.events = Number(row.reason ?? 0);
    else if (row.kind === 'slots' && row.reason !== null) result.slots = Number(row.reason);
  }
  // A refused event is reported only where its change stood: a delivery recorded DEAD (the record
  // sets the state it was given), an endpoint this record disabled.
  for (const [key, error] of refused) {
    const stood =
      error.type === WEBHOOK_DELIVERY_DEAD_EVENT
        ? result.recorded.has(key)
        : result.disabled.some((disabled) => disabled.endpointId === key);
    if (stood) result.invalidEvents.push(error);
  }
  return result;
}

/**
 * The durability barrier (see "Commits" above): a transaction that writes one WAL record and commits
 * synchronously, so it returns once the WAL is flushed up to its commit, and with it every
 * asynchronous commit made before it started (claims, records). One barrier covers every batch
 * recorded before it, so callers share it ({@link createDurabilityBarrier}).
 */
export async function flushCommits(db: Kysely<Database>): Promise<void> {
  await sql`select set_config('synchronous_commit', 'on', true), pg_logical_emit_message(true, 'herald-webhooks', '')`.execute(
    db,
  );
}

/** Coalesces {@link flushCommits}: `wait()` resolves after a flush that started after the call. */
export interface DurabilityBarrier {
  wait(): Promise<void>;
}

export function createDurabilityBarrier(flush: () => Promise<void>): DurabilityBarrier {
  let running: Promise<void> | undefined;
  let next: Promise<void> | undefined;
  const start = (): Promise<void> => {
    const flushing = flush().finally(() => {
      if (running === flushing) running = undefined;
    });
    running = flushing;
    return flushing;
  };
  return {
    wait() {
      if (!running) return start();
      // A flush is running: it may have started before our commit, so wait for the one after it.
      next ??= running
        .catch(() => {})
        .then(() => {
          next = undefined;
          return start();
        });
      return next;
    },
  };
}

/**
 * Frees every q-lease so the due scan hands those deliveries out again at once. Called when the
 * stream lost its entries (Redis restarted without persistence). Attempts in flight keep their a-leases.
 */
export async function releaseQueuedDeliveries(db: Kysely<Database>): Promise<number> {
  const result = await db
    .updateTable('webhook_deliveries')
    .set({ lease_token: null, leased_until: null })
    .where('status', '=', 'PENDING')
    .where('lease_token', 'like', `${QUEUED_LEASE_PREFIX}%`)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}
