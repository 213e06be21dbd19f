import { WEBHOOK_DELIVERY_ID_PREFIX } from '@herald/contracts';
import { type Kysely, type RawBuilder, sql } from 'kysely';
import type { Database } from './database.js';
import type { WebhookDelivery, WebhookDeliveryStatus } from './webhook-tables.js';

/*
 * Deliveries: the database is the source of truth for every delivery's state. A delivery is held by at
 * most one party at a time through its lease: `q:<token>` while its work item sits in the queue (set by
 * `claimDueDeliveries`), `a:<token>` while a dispatcher makes an attempt (`claimDeliveryForAttempt`).
 * An expired lease means the holder is gone and the scheduler hands the delivery out again, so a lost
 * queue entry or a killed dispatcher delays a delivery but never loses it.
 */

const QUEUED_LEASE_PREFIX = 'q:';
const ATTEMPT_LEASE_PREFIX = 'a:';

/** `x` milliseconds as a PostgreSQL interval expression. */
const ms = (value: number) => sql`(${value}::double precision * interval '1 millisecond')`;

export interface FanOutResult {
  /** False when no such event exists. */
  found: boolean;
  /** Deliveries created now (0 when an earlier fan-out of the same event made them already). */
  created: number;
}

/**
 * Creates one delivery per endpoint of the event's organisation that selected its type, due at once,
 * and marks the event dispatched, in one statement. Idempotent: deliveries are unique per (event,
 * endpoint), so a duplicate of the event in the queue creates nothing.
 */
export async function fanOutEvent(db: Kysely<Database>, eventId: string): Promise<FanOutResult> {
  const { rows } = await sql<{ found: number; created: number }>`
    with event as (
      update webhook_outbox set dispatched_at = coalesce(dispatched_at, now())
      where id = ${eventId}
      returning id, org_id, type
    ), created as (
      insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, next_attempt_at)
      select ${WEBHOOK_DELIVERY_ID_PREFIX} || replace(gen_random_uuid()::text, '-', ''), event.id, endpoint.id, event.org_id, event.type, now()
      from event join webhook_endpoints endpoint
        on endpoint.org_id = event.org_id and event.type = any(endpoint.event_types)
      on conflict (event_id, endpoint_id) do nothing
      returning id
    )
    select (select count(*) from event)::int as found, (select count(*) from created)::int as created
  `.execute(db);
  const row = rows[0];
  return { found: (row?.found ?? 0) > 0, created: row?.created ?? 0 };
}

export interface DueClaim {
  /** At most this many deliveries. */
  limit: number;
  /** How long a queued delivery stays assigned to its queue entry before it is handed out again. */
  leaseMs: number;
  /** At most this many deliveries per endpoint queued or in flight at once, across all dispatchers. */
  endpointConcurrency: number;
}

export interface QueuedDelivery {
  id: string;
  endpointId: string;
  /** The `q:` lease the queue entry must present to claim the delivery for an attempt. */
  lease: string;
}

/**
 * Hands out due deliveries: takes a queue lease on each and returns them, earliest due first. An
 * endpoint with `endpointConcurrency` deliveries already queued or in flight gets none, so a slow
 * receiver's backlog waits here instead of filling the queue ahead of other receivers. One scheduler
 * pass runs at a time (a transaction-scoped advisory lock); a pass that finds the lock taken returns
 * nothing.
 */
export async function claimDueDeliveries(db: Kysely<Database>, claim: DueClaim): Promise<QueuedDelivery[]> {
  return db.transaction().execute(async (trx) => {
    const { rows: lock } = await sql<{ locked: boolean }>`
      select pg_try_advisory_xact_lock(hashtext(current_schema() || ':herald-webhook-scheduler')) as locked
    `.execute(trx);
    if (!lock[0]?.locked) return [];
    const { rows } = await sql<{ id: string; endpoint_id: string; lease_token: string }>`
      with busy as (
        select endpoint_id, count(*)::int as n from webhook_deliveries
        where status = 'PENDING' and leased_until > now()
        group by endpoint_id
      ), due as (
        select id, endpoint_id, next_attempt_at, seq,
          row_number() over (partition by endpoint_id order by next_attempt_at, seq) as rank
        from webhook_deliveries
        where status = 'PENDING' and next_attempt_at <= now() and (leased_until is null or leased_until <= now())
      ), picked as (
        select due.id from due left join busy using (endpoint_id)
        where due.rank + coalesce(busy.n, 0) <= ${claim.endpointConcurrency}
        order by due.next_attempt_at, due.seq
        limit ${claim.limit}
      )
      update webhook_deliveries delivery
      set lease_token = ${QUEUED_LEASE_PREFIX} || gen_random_uuid()::text, leased_until = now() + ${ms(claim.leaseMs)}
      from picked
      where delivery.id = picked.id
        -- Checked again on the row as it is now: a dispatcher may have claimed it since the snapshot.
        and delivery.status = 'PENDING'
        and (delivery.leased_until is null or delivery.leased_until <= now())
      returning delivery.id, delivery.endpoint_id, delivery.lease_token
    `.execute(trx);
    return rows.map((row) => ({ id: row.id, endpointId: row.endpoint_id, lease: row.lease_token }));
  });
}

/**
 * Releases the queue leases of every queued delivery so the scheduler hands them out again at once.
 * Called when the queue lost its entries (Redis restarted without persistence). Attempts in flight
 * keep their leases.
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
  /** Signing secrets in use, newest first. */
  secrets: string[];
  /** Attempts made before this one. */
  attemptCount: number;
  /** Milliseconds since the retry horizon started (creation or last replay), by the database clock. */
  ageMs: number;
  /** The `a:` lease that `recordDeliveryAttempt` must present. */
  attemptLease: string;
}

export interface AttemptClaim {
  deliveryId: string;
  /** The queue lease carried by the work item. */
  queueLease: string;
  /** How long the attempt may take before the delivery is considered abandoned. */
  leaseMs: number;
}

/**
 * Takes a delivery for one attempt when it is still pending and due, and either the work item's queue
 * lease is current or nobody holds it. Exactly one of any number of concurrent claims succeeds, so a
 * duplicated or reclaimed work item never causes two attempts at once.
 * @returns undefined when the work item is stale: the delivery succeeded, died, was deleted, is not
 *   due, or someone else holds it
 */
export async function claimDeliveryForAttempt(
  db: Kysely<Database>,
  claim: AttemptClaim,
): Promise<ClaimedDelivery | undefined> {
  return claimForAttempt(
    db,
    claim.leaseMs,
    sql`id = ${claim.deliveryId}
      and status = 'PENDING'
      and next_attempt_at <= now()
      and (lease_token = ${claim.queueLease} or leased_until is null or leased_until <= now())`,
  );
}

/**
 * Takes the endpoint's next due delivery that nobody holds, for an attempt right away. A dispatcher
 * that has just finished an attempt keeps the endpoint's slot busy this way without a round through
 * the scheduler and the queue; the per-endpoint cap holds, since the slot passes from one delivery to
 * the next.
 */
export async function claimNextDueDelivery(
  db: Kysely<Database>,
  next: { endpointId: string; leaseMs: number },
): Promise<ClaimedDelivery | undefined> {
  return claimForAttempt(
    db,
    next.leaseMs,
    sql`id = (
      select id from webhook_deliveries
      where endpoint_id = ${next.endpointId}
        and status = 'PENDING'
        and next_attempt_at <= now()
        and (leased_until is null or leased_until <= now())
      order by next_attempt_at, seq
      limit 1
      for update skip locked
    )
    and status = 'PENDING'
    and (leased_until is null or leased_until <= now())`,
  );
}

/** Takes an `a:` lease on the delivery `where` picks, and reads what the attempt needs, in one statement. */
async function claimForAttempt(
  db: Kysely<Database>,
  leaseMs: number,
  where: RawBuilder<unknown>,
): Promise<ClaimedDelivery | undefined> {
  const { rows } = await sql<{
    id: string;
    event_id: string;
    event_type: string;
    org_id: string;
    endpoint_id: string;
    url: string;
    body: string;
    secrets: string[] | null;
    attempt_count: number;
    age_ms: number;
    lease_token: string;
  }>`
    with claimed as (
      update webhook_deliveries
      set lease_token = ${ATTEMPT_LEASE_PREFIX} || gen_random_uuid()::text, leased_until = now() + ${ms(leaseMs)}
      where ${where}
      returning id, event_id, event_type, org_id, endpoint_id, attempt_count, horizon_from, lease_token
    )
    select claimed.id, claimed.event_id, claimed.event_type, claimed.org_id, claimed.endpoint_id,
      claimed.attempt_count, claimed.lease_token, endpoint.url, event.body,
      (extract(epoch from now() - claimed.horizon_from) * 1000)::double precision as age_ms,
      (select array_agg(secret.secret order by secret.id desc) from webhook_endpoint_secrets secret
        where secret.endpoint_id = claimed.endpoint_id and (secret.expires_at is null or secret.expires_at > now())
      ) as secrets
    from claimed
    join webhook_endpoints endpoint on endpoint.id = claimed.endpoint_id
    join webhook_outbox event on event.id = claimed.event_id
  `.execute(db);
  const row = rows[0];
  if (!row) return undefined;
  return {
    id: row.id,
    eventId: row.event_id,
    eventType: row.event_type,
    orgId: row.org_id,
    endpointId: row.endpoint_id,
    url: row.url,
    body: row.body,
    secrets: row.secrets ?? [],
    attemptCount: row.attempt_count,
    ageMs: Number(row.age_ms),
    attemptLease: row.lease_token,
  };
}

/** What happens to a delivery after an attempt. */
export type DeliveryNext = { status: 'SUCCEEDED' } | { status: 'PENDING'; retryInMs: number } | { status: 'DEAD' };

export interface AttemptRecord {
  deliveryId: string;
  attemptLease: string;
  attempt: { at: Date; statusCode: number | null; durationMs: number; error: string | null };
  next: DeliveryNext;
}

/**
 * Records an attempt and the delivery's next state in one statement. The attempt joins the history
 * whenever the delivery still exists; the state changes only while `attemptLease` is still the lease.
 * @returns 'recorded', 'lease-lost' (someone else holds the delivery now: the state is theirs to set)
 *   or 'gone' (the delivery was deleted with its endpoint)
 */
export async function recordDeliveryAttempt(
  db: Kysely<Database>,
  record: AttemptRecord,
): Promise<'recorded' | 'lease-lost' | 'gone'> {
  const { next, attempt } = record;
  const retryInMs = next.status === 'PENDING' ? next.retryInMs : null;
  const { rows } = await sql<{ found: number; updated: number }>`
    with locked as (
      select id, lease_token from webhook_deliveries where id = ${record.deliveryId} for update
    ), attempt as (
      insert into webhook_attempts (delivery_id, at, status_code, duration_ms, error)
      select id, ${attempt.at}::timestamptz, ${attempt.statusCode}::int, ${attempt.durationMs}::int, ${attempt.error}::text
      from locked
      returning delivery_id
    ), updated as (
      update webhook_deliveries delivery
      set status = ${next.status},
        attempt_count = delivery.attempt_count + 1,
        next_attempt_at = case when ${retryInMs}::double precision is null then null
          else now() + (${retryInMs}::double precision * interval '1 millisecond') end,
        lease_token = null,
        leased_until = null,
        updated_at = now()
      from locked
      where delivery.id = locked.id and locked.lease_token = ${record.attemptLease}
      returning delivery.id
    )
    select (select count(*) from locked)::int as found, (select count(*) from updated)::int as updated
  `.execute(db);
  const row = rows[0];
  if (!row || row.found === 0) return 'gone';
  return row.updated > 0 ? 'recorded' : 'lease-lost';
}

export async function findWebhookDeliveryById(db: Kysely<Database>, id: string): Promise<WebhookDelivery | undefined> {
  return db.selectFrom('webhook_deliveries').selectAll().where('id', '=', id).executeTakeFirst();
}

export interface DeliveryPageQuery {
  endpointId: string;
  status?: WebhookDeliveryStatus | null | undefined;
  /** Only deliveries older than this `seq` (the `after` cursor). */
  afterSeq?: string | null | undefined;
  /** Only deliveries newer than this `seq` (the `before` cursor). */
  beforeSeq?: string | null | undefined;
  limit: number;
  /** Walk from the oldest end (for `last`); the caller reverses the rows. */
  inverted?: boolean;
}

/** One page of an endpoint's deliveries, newest first (keyset pagination on `seq`). */
export async function listWebhookDeliveries(
  db: Kysely<Database>,
  query: DeliveryPageQuery,
): Promise<WebhookDelivery[]> {
  let select = db.selectFrom('webhook_deliveries').selectAll().where('endpoint_id', '=', query.endpointId);
  if (query.status) select = select.where('status', '=', query.status);
  if (query.afterSeq != null) select = select.where('seq', '<', query.afterSeq);
  if (query.beforeSeq != null) select = select.where('seq', '>', query.beforeSeq);
  return select
    .orderBy('seq', query.inverted ? 'asc' : 'desc')
    .limit(query.limit)
    .execute();
}

/**
 * Makes a delivery due again now, whatever its state, with a fresh retry horizon; its attempt history
 * stays. An attempt in flight keeps its lease and finishes first.
 * @returns the delivery, or undefined when it does not exist
 */
export async function replayWebhookDelivery(db: Kysely<Database>, id: string): Promise<WebhookDelivery | undefined> {
  return db
    .updateTable('webhook_deliveries')
    .set({
      status: 'PENDING',
      next_attempt_at: sql<Date>`now()`,
      horizon_from: sql<Date>`now()`,
      updated_at: sql<Date>`now()`,
    })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst();
}

/** Deliveries waiting for a retry (pending after at least one failed attempt). */
export async function countRetryBacklog(db: Kysely<Database>): Promise<number> {
  const row = await db
    .selectFrom('webhook_deliveries')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('status', '=', 'PENDING')
    .where('attempt_count', '>', 0)
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

/** A DEAD delivery, as the embedded queue lists its dead letters. */
export interface DeadDelivery {
  id: string;
  eventId: string;
  eventType: string;
  orgId: string;
  endpointId: string;
  url: string;
  attemptCount: number;
  lastError: string | null;
  lastStatusCode: number | null;
  updatedAt: Date;
}

/** DEAD deliveries, most recent first. */
export async function listDeadWebhookDeliveries(db: Kysely<Database>, limit: number): Promise<DeadDelivery[]> {
  const rows = await db
    .selectFrom('webhook_deliveries as delivery')
    .innerJoin('webhook_endpoints as endpoint', 'endpoint.id', 'delivery.endpoint_id')
    .leftJoinLateral(
      (eb) =>
        eb
          .selectFrom('webhook_attempts')
          .select(['error', 'status_code'])
          .whereRef('webhook_attempts.delivery_id', '=', 'delivery.id')
          .orderBy('webhook_attempts.id', 'desc')
          .limit(1)
          .as('last'),
      (join) => join.onTrue(),
    )
    .select([
      'delivery.id',
      'delivery.event_id',
      'delivery.event_type',
      'delivery.org_id',
      'delivery.endpoint_id',
      'delivery.attempt_count',
      'delivery.updated_at',
      'endpoint.url',
      'last.error',
      'last.status_code',
    ])
    .where('delivery.status', '=', 'DEAD')
    .orderBy('delivery.updated_at', 'desc')
    .limit(limit)
    .execute();
  return rows.map((row) => ({
    id: row.id,
    eventId: row.event_id,
    eventType: row.event_type,
    orgId: row.org_id,
    endpointId: row.endpoint_id,
    url: row.url,
    attemptCount: row.attempt_count,
    lastError: row.error ?? null,
    lastStatusCode: row.status_code ?? null,
    updatedAt: row.updated_at,
  }));
}
