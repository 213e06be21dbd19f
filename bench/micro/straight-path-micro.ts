/**
 * Prices a delivery path that writes each first-attempt success's delivery row once, against today's
 * (bench/results/webhooks-straight-path/README.md). PostgreSQL statements only: no HTTP, no Redis, no
 * lanes; one endpoint, one connection per side, named prepared statements; every outcome a 2xx.
 *
 * - `today`: the latest migrations and the engine's own statements, as bench/micro/lease-micro.ts runs them:
 *   the backlog fanned out (`FAN_OUT_LIMIT` events per statement, default 500 as the relay), a lane's claim,
 *   then record-and-hand-over cycles of `batch` (the delivery row: inserted PENDING at fan-out, a HOT
 *   a-lease update at the hand-over, a non-HOT update to SUCCEEDED at the record).
 * - `straight`: a prototype in its own schema (the latest migrations plus two lease columns on
 *   `webhook_outbox_pending`). A cycle is one statement that records the last batch and takes the next:
 *   it leases `batch` queued events (a HOT update of the narrow queue row) and returns each with its
 *   endpoint, body and sealed secrets; the record inserts each delivery row already SUCCEEDED (the attempt
 *   folded in, as today's record does) and deletes the events' queue rows. There is no fan-out statement,
 *   no PENDING delivery row and no update of one.
 *
 * Rounds alternate which side runs first. Prints PostgreSQL backend CPU µs and client CPU µs per delivery,
 * and what each side wrote to `webhook_deliveries`.
 *
 *   node --import tsx bench/micro/straight-path-micro.ts [events=10000] [rounds=4] [batch=80]
 *
 * What the prototype leaves out (it prices the write path, it is not a design): endpoints that cannot take
 * the delivery now (cap, rate limit, FIFO line, disabled, a failed attempt) would still need a PENDING
 * row written at take time, several endpoints per event need the queue row kept until every one is
 * recorded, and a lease that expires must hand its events to another dispatcher.
 */
import { createDatabase, type Database, migrateToLatest, sealSecret } from '@herald/db';
import { type ClaimedDelivery, claimDeliveries, fanOutOutbox, recordOutcomes } from '@herald/webhook-engine';
import { attemptOutcome } from '@herald/webhook-engine/testing';
import { type Kysely, sql } from 'kysely';
import { median, procSample } from '../src/common.js';
import { microPostBody } from './post-body.js';

const events = Number(process.argv[2] ?? 10_000);
const rounds = Number(process.argv[3] ?? 4);
const batch = Number(process.argv[4] ?? 80);
const fanOutLimit = Number(process.env.FAN_OUT_LIMIT ?? 500);
const CAP = 10;
const LEASE_MS = 15_000;
const ENDPOINT = 'we_micro';
const MICRO_KEYRING = [{ id: 'micro', key: Buffer.alloc(32, 1) }] as const;
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const admin = await createDatabase({ kind: 'postgres', url: base, poolMax: 1 });
const body = microPostBody();
/** A PostgreSQL backend's CPU µs so far (every thread's schedstat, as the bench reads its processes). */
const cpuOf = (pid: number) => procSample(pid).cpuUs;

type Variant = 'today' | 'straight';
interface Side {
  db: Kysely<Database>;
  pid: number;
  schema: string;
  close(): Promise<void>;
}

async function open(variant: Variant, round: number): Promise<Side> {
  const schema = `straight_micro_${process.pid}_${variant}_${round}`;
  await sql`create schema ${sql.id(schema)}`.execute(admin.db);
  const url = new URL(base);
  url.searchParams.set('options', `-c search_path=${schema}`);
  const database = await createDatabase({ kind: 'postgres', url: url.toString(), poolMax: 1 });
  const db = database.db;
  await migrateToLatest(db);
  if (variant === 'straight') {
    await sql`alter table webhook_outbox_pending add column lease text, add column leased_until timestamptz`.execute(
      db,
    );
  }
  await sql`insert into webhook_endpoints (id, org_id, url, event_types)
    values (${ENDPOINT}, 'micro', 'http://127.0.0.1:9/', '{post.published}')`.execute(db);
  await sql`insert into webhook_endpoint_secrets (endpoint_id, sealed_secret)
    values (${ENDPOINT}, ${sealSecret(MICRO_KEYRING, ENDPOINT, 'whsec_x')})`.execute(db);
  // The backlog, 100 events per statement (the queue's trigger adds their queue rows).
  for (let from = 1; from <= events; from += 100) {
    const to = Math.min(events, from + 99);
    await sql`insert into webhook_outbox (id, org_id, type, body)
      select 'evt_micro' || n, 'micro', 'post.published', ${body} from generate_series(${from}::int, ${to}::int) n`.execute(
      db,
    );
  }
  const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db);
  return {
    db,
    pid: rows[0]!.pid,
    schema,
    async close() {
      await database.close();
      await sql`drop schema ${sql.id(schema)} cascade`.execute(admin.db);
    },
  };
}

/** Today's statements: fan-out of the whole backlog, a claim, record-and-hand-over cycles. */
async function today(db: Kysely<Database>): Promise<number> {
  let queued: Awaited<ReturnType<typeof fanOutOutbox>>['queued'] = [];
  for (;;) {
    const fan = await fanOutOutbox(db, { limit: fanOutLimit, queueLeaseMs: LEASE_MS });
    queued = queued.concat(fan.queued);
    if (fan.events === 0) break;
  }
  const lease = `a:${crypto.randomUUID()}`;
  let claimed: ClaimedDelivery[] = await claimDeliveries(db, {
    queued: queued.slice(0, CAP),
    chainEndpoints: [ENDPOINT],
    endpointCap: CAP,
    leaseMs: LEASE_MS,
    lease,
  });
  let done = 0;
  while (claimed.length > 0) {
    const result = await recordOutcomes(
      db,
      claimed.map((delivery) => attemptOutcome(delivery)),
      {
        disableAfterMs: 86_400_000,
        handOver: { endpointId: ENDPOINT, leaseMs: LEASE_MS, lease, take: batch, renewSlots: false },
      },
    );
    done += claimed.length;
    claimed = result.handedOver;
  }
  return done;
}

interface Taken {
  seq: string;
  event_id: string;
  endpoint_id: string;
  org_id: string;
  event_type: string;
  url: string;
  body: string;
  secrets: string[];
}

/** The prototype: one statement per cycle records the last batch and takes the next. */
async function straight(db: Kysely<Database>): Promise<number> {
  const lease = `a:${crypto.randomUUID()}`;
  let held: Taken[] = [];
  let done = 0;
  for (let first = true; first || held.length > 0; first = false) {
    const outcomes = held.map((taken) => ({
      taken,
      outcome: attemptOutcome({ id: taken.event_id, endpointId: taken.endpoint_id, lease }),
    }));
    const { rows } = await sql<Taken>`
      with input as (
        select input.seq, input.event_id, input.endpoint_id, input.org_id, input.event_type, input.at,
          input.status_code, input.duration_ms, input.response_body
        from unnest(
          ${outcomes.map((o) => o.taken.seq)}::bigint[], ${outcomes.map((o) => o.taken.event_id)}::text[],
          ${outcomes.map((o) => o.taken.endpoint_id)}::text[], ${outcomes.map((o) => o.taken.org_id)}::text[],
          ${outcomes.map((o) => o.taken.event_type)}::text[], ${outcomes.map((o) => o.outcome.at.toISOString())}::timestamptz[],
          ${outcomes.map((o) => o.outcome.statusCode)}::int[], ${outcomes.map((o) => o.outcome.durationMs)}::int[],
          ${outcomes.map((o) => o.outcome.responseBody)}::text[]
        ) as input(seq, event_id, endpoint_id, org_id, event_type, at, status_code, duration_ms, response_body)
        limit ${outcomes.length}
      ), released as (
        delete from webhook_outbox_pending pending
        where pending.seq = any(array(select input.seq from input)) and pending.lease = ${lease}
        returning pending.seq
      ), recorded as (
        insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, status, attempt_count,
          succeeded_at, success_status_code, success_duration_ms, success_response_body)
        select 'whd_' || replace(gen_random_uuid()::text, '-', ''), input.event_id, input.endpoint_id, input.org_id,
          input.event_type, 'SUCCEEDED', 1, input.at, input.status_code, input.duration_ms, input.response_body
        from input join released on released.seq = input.seq
        on conflict (event_id, endpoint_id) do nothing
      ), taken as (
        update webhook_outbox_pending pending
        set lease = ${lease}, leased_until = now() + ${LEASE_MS} * interval '1 millisecond'
        where pending.seq = any(array(
          select due.seq from webhook_outbox_pending due
          where due.leased_until is null or due.leased_until < now()
          order by due.seq limit ${batch} for update skip locked
        ))
        returning pending.seq
      )
      select taken.seq::text as seq, outbox.id as event_id, endpoint.id as endpoint_id, outbox.org_id,
        outbox.type as event_type, endpoint.url, outbox.body,
        array(select secret.sealed_secret from webhook_endpoint_secrets secret where secret.endpoint_id = endpoint.id) as secrets
      from taken
      join webhook_outbox outbox on outbox.seq = taken.seq
      join webhook_endpoints endpoint on endpoint.org_id = outbox.org_id
      where outbox.type = any(endpoint.event_types) and endpoint.deleted_at is null and endpoint.status = 'ENABLED'
        and case when endpoint.filter is null then true else outbox.body::jsonb @> endpoint.filter end
      order by taken.seq`.execute(db);
    done += held.length;
    held = rows;
  }
  return done;
}

const results: Record<Variant, { pg: number[]; client: number[] }> = {
  today: { pg: [], client: [] },
  straight: { pg: [], client: [] },
};
const written: Record<Variant, string> = { today: '', straight: '' };
for (let round = 0; round < rounds; round++) {
  const order: Variant[] = round % 2 === 0 ? ['today', 'straight'] : ['straight', 'today'];
  for (const variant of order) {
    const side = await open(variant, round);
    try {
      const pg0 = cpuOf(side.pid);
      const own0 = process.cpuUsage();
      const done = await (variant === 'today' ? today(side.db) : straight(side.db));
      const own = process.cpuUsage(own0);
      const pg = cpuOf(side.pid) - pg0;
      const { rows } = await sql<{ succeeded: number; pending: number; queued: number }>`
        select (select count(1)::int from webhook_deliveries where status = 'SUCCEEDED') as succeeded,
          (select count(1)::int from webhook_deliveries where status <> 'SUCCEEDED') as pending,
          (select count(1)::int from webhook_outbox_pending) as queued`.execute(side.db);
      const counts = rows[0]!;
      if (done !== events || counts.succeeded !== events || counts.pending !== 0 || counts.queued !== 0) {
        throw new Error(`${variant}: recorded ${done} of ${events}, table holds ${JSON.stringify(counts)}`);
      }
      results[variant].pg.push(Math.round(pg / done));
      results[variant].client.push(Math.round((own.user + own.system) / done));
      await sql`select pg_stat_force_next_flush()`.execute(side.db);
      await sql`select 1`.execute(side.db);
      const { rows: stat } = await sql<{ ins: string; upd: string; hot: string }>`
        select n_tup_ins as ins, n_tup_upd as upd, n_tup_hot_upd as hot from pg_stat_user_tables
        where relname = 'webhook_deliveries' and schemaname = ${side.schema}`.execute(admin.db);
      const s = stat[0]!;
      written[variant] = `${s.ins} inserts, ${s.upd} updates (${s.hot} HOT)`;
    } finally {
      await side.close();
    }
  }
}
console.log(
  JSON.stringify({
    events,
    batch,
    rounds,
    fanOutLimit,
    perDelivery: Object.fromEntries(
      Object.entries(results).map(([variant, r]) => [
        variant,
        { pgCpuUs: r.pg, clientCpuUs: r.client, medianPg: median(r.pg), medianClient: median(r.client) },
      ]),
    ),
    deliveriesTable: written,
  }),
);
await admin.close();
