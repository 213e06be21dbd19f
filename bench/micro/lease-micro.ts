/**
 * Micro-benchmark of the lease protocol's statements alone (no HTTP, no Redis), on one connection with
 * named prepared statements (as the dispatcher sends them; `PREP=0` for unnamed ones). One endpoint.
 * Prints wall ms and PostgreSQL backend CPU µs per delivery, and updates (HOT ones apart).
 *
 *   node --import tsx bench/micro/lease-micro.ts [events=3000] [cap=10] [batch=cap] [mode=backlog]
 *
 * - `backlog`: `events` are fanned out first (LIMIT `FAN_OUT_LIMIT`, default 200, per statement); then a lane's cycle: record
 *   `batch` outcomes and take `batch` more in the same statement (hand-over), until all are recorded
 *   (`RENEW_SLOTS=0`: without renewing the slot row, as between a lane's renewals).
 * - `steady`: what a dispatcher does at a steady rate: `batch` new events at a time are fanned out,
 *   and one record takes them (q-leased, as a lane does for work entries) while recording the last
 *   ones' outcomes, followed by a durability barrier (the entries are acknowledged after it).
 *
 * Compare schema or statement changes in the same time window, alternating runs. `EXTRA_SQL` runs after
 * the migrations (e.g. to try an index); `EXPLAIN=1` (or `=<cycle>`) logs the plans of cycle 50 (or that one) to the server log
 * through auto_explain.
 */
import { readFileSync } from 'node:fs';
import { createDatabase, type Database, migrateToLatest, sealSecret } from '@herald/db';
import {
  type ClaimedDelivery,
  claimDeliveries,
  fanOutOutbox,
  flushCommits,
  recordOutcomes,
} from '@herald/webhook-engine';
import { attemptOutcome } from '@herald/webhook-engine/testing';
import { type Kysely, sql } from 'kysely';
import { microPostBody } from './post-body.js';

const events = Number(process.argv[2] ?? 3000);
const cap = Number(process.argv[3] ?? 10);
const batch = Number(process.argv[4] ?? cap);
const mode = process.argv[5] ?? 'backlog';
/**
 * `RENEW_SLOTS=0`: backlog records leave the lane's slot row alone unless they lower it, as a lane does
 * between the renewals of its leases (every few seconds); by default every record renews it.
 */
const renewSlots = process.env.RENEW_SLOTS !== '0';
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `lease_micro_${process.pid}`;
const admin = await createDatabase({ kind: 'postgres', url: base, poolMax: 1 });
await sql`create schema ${sql.id(schema)}`.execute(admin.db);
const url = new URL(base);
url.searchParams.set('options', `-c search_path=${schema}`);
url.searchParams.set('application_name', 'lease_micro');
const database = await createDatabase({
  kind: 'postgres',
  url: url.toString(),
  poolMax: 1,
  preparedStatements: process.env.PREP !== '0',
});
const db = database.db;
const cpuOf = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100;
};
const success = (d: ClaimedDelivery) => attemptOutcome(d);
const LEASE_MS = 15_000;
/** Seals the one endpoint's secret (nothing here opens it). */
const MICRO_KEYRING = [{ id: 'micro', key: Buffer.alloc(32, 1) }] as const;
const LANE_LEASE = `a:${crypto.randomUUID()}`;

/** `BODY=post`: a published post's body (~330 bytes, as the API records it) instead of `{"id":"x"}`. */
const body = process.env.BODY === 'post' ? microPostBody() : '{"id":"x"}';
/** `HISTORIED=1`: each event also gets the API's `historied_at` mark after its insert, as a pod that appended it to the subscription history does. */
const historied = process.env.HISTORIED === '1';
/** Events per fan-out statement (`FAN_OUT_LIMIT`; the dispatcher's relay takes 500). */
const fanOutLimit = Number(process.env.FAN_OUT_LIMIT ?? 200);

async function insertEvents(on: Kysely<Database>, from: number, count: number) {
  await sql`insert into ${sql.id(schema, 'webhook_outbox')} (id, org_id, type, body)
    select 'evt_micro' || n, 'micro', 'post.published', ${body} from generate_series(${from}::int, ${from + count - 1}::int) n`.execute(
    on,
  );
  if (historied) {
    await sql`update ${sql.id(schema, 'webhook_outbox')} set historied_at = now()
      where id in (select 'evt_micro' || n from generate_series(${from}::int, ${from + count - 1}::int) n)`.execute(on);
  }
}

/** Every event fanned out first, then record-and-take cycles of `batch`. */
async function backlog(): Promise<{ fanOut: () => Promise<void>; cycles: () => Promise<number> }> {
  await insertEvents(db, 1, events);
  let queued: Awaited<ReturnType<typeof fanOutOutbox>>['queued'] = [];
  return {
    async fanOut() {
      for (;;) {
        const fan = await fanOutOutbox(db, { limit: fanOutLimit, queueLeaseMs: LEASE_MS });
        queued = queued.concat(fan.queued);
        if (fan.events === 0) break;
      }
    },
    async cycles() {
      let claimed = await claimDeliveries(db, {
        queued: queued.slice(0, cap),
        chainEndpoints: ['we_micro'],
        endpointCap: cap,
        leaseMs: LEASE_MS,
        lease: LANE_LEASE,
      });
      let done = 0;
      let cycles = 0;
      while (claimed.length > 0) {
        cycles++;
        explainAt(cycles);
        const result = await recordOutcomes(db, claimed.map(success), {
          disableAfterMs: 86_400_000,
          handOver: { endpointId: 'we_micro', leaseMs: LEASE_MS, lease: LANE_LEASE, take: batch, renewSlots },
        });
        done += claimed.length;
        claimed = result.handedOver;
      }
      return done;
    },
  };
}

/** Batches of `batch` events: fan-out, then one record that takes them and records the last batch. */
/** Backend CPU µs by statement in the steady mode (summed over its runs). */
const phases = { fanOut: 0, record: 0, flush: 0 };
async function timed<T>(phase: keyof typeof phases, run: () => Promise<T>): Promise<T> {
  const before = cpuOf(backendPid);
  const result = await run();
  phases[phase] += cpuOf(backendPid) - before;
  return result;
}
let backendPid = 0;

async function steady(): Promise<number> {
  let held: ClaimedDelivery[] = [];
  let done = 0;
  for (let next = 1, cycles = 1; next <= events || held.length > 0; cycles++) {
    explainAt(cycles);
    const count = Math.min(batch, events - next + 1);
    if (count > 0) {
      await insertEvents(admin.db, next, count);
      next += count;
      await timed('fanOut', () => fanOutOutbox(db, { limit: fanOutLimit, queueLeaseMs: LEASE_MS }));
    }
    const result = await timed('record', () =>
      recordOutcomes(db, held.map(success), {
        disableAfterMs: 86_400_000,
        handOver: { endpointId: 'we_micro', leaseMs: LEASE_MS, lease: LANE_LEASE, take: 6 * cap },
      }),
    );
    await timed('flush', () => flushCommits(db));
    done += held.length;
    held = result.handedOver;
  }
  return done;
}

let explaining = false;
function explainAt(cycle: number) {
  if (!process.env.EXPLAIN) return;
  const at = Number(process.env.EXPLAIN) > 1 ? Number(process.env.EXPLAIN) : 50;
  if (cycle === at && !explaining) {
    explaining = true;
    void sql`select set_config('auto_explain.log_min_duration', '0', false), set_config('auto_explain.log_analyze', 'on', false), set_config('auto_explain.log_nested_statements', 'on', false), set_config('auto_explain.log_buffers', 'on', false), set_config('auto_explain.log_wal', 'on', false)`.execute(
      db,
    );
  } else if (cycle === at + 1 && explaining) {
    explaining = false;
    void sql`select set_config('auto_explain.log_min_duration', '-1', false)`.execute(db);
  }
}

try {
  await migrateToLatest(db);
  if (process.env.EXTRA_SQL) await sql.raw(process.env.EXTRA_SQL).execute(db);
  const { rows: pidRows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db);
  const pid = pidRows[0]!.pid;
  backendPid = pid;
  if (process.env.PRINT_PID) console.error(`backend pid ${pid}`);
  await sql`insert into webhook_endpoints (id, org_id, url, event_types) values ('we_micro', 'micro', 'http://127.0.0.1:9/', '{post.published}')`.execute(
    db,
  );
  // Sealed like every stored secret, so claims carry an envelope of the real size.
  await sql`insert into webhook_endpoint_secrets (endpoint_id, sealed_secret)
    values ('we_micro', ${sealSecret(MICRO_KEYRING, 'we_micro', 'whsec_x')})`.execute(db);
  if (process.env.EXPLAIN) await sql`load 'auto_explain'`.execute(db);
  const out: Record<string, unknown> = { events, cap, batch, mode };
  if (mode === 'steady') {
    const t0 = performance.now();
    const c0 = cpuOf(pid);
    const own0 = process.cpuUsage();
    const done = await steady();
    const own = process.cpuUsage(own0);
    out.steady = {
      done,
      msPerDelivery: +((performance.now() - t0) / done).toFixed(4),
      pgCpuUs: +((cpuOf(pid) - c0) / done).toFixed(1),
      clientCpuUs: +((own.user + own.system) / done).toFixed(1),
      pgCpuUsBy: Object.fromEntries(Object.entries(phases).map(([k, v]) => [k, +(v / done).toFixed(1)])),
    };
  } else {
    const run = await backlog();
    const t0 = performance.now();
    const c0 = cpuOf(pid);
    await run.fanOut();
    const t1 = performance.now();
    const c1 = cpuOf(pid);
    const own0 = process.cpuUsage();
    const done = await run.cycles();
    const own = process.cpuUsage(own0);
    const t2 = performance.now();
    out.fanOut = { msPerDelivery: +((t1 - t0) / events).toFixed(4), pgCpuUs: +((c1 - c0) / events).toFixed(1) };
    out.cycle = {
      done,
      msPerDelivery: +((t2 - t1) / done).toFixed(4),
      pgCpuUs: +((cpuOf(pid) - c1) / done).toFixed(1),
      clientCpuUs: +((own.user + own.system) / done).toFixed(1),
      deliveriesPerSec: Math.round(done / ((t2 - t1) / 1000)),
    };
  }
  // This backend's statistics reach the shared ones at a transaction's end, at most once a second
  // unless forced.
  await sql`select pg_stat_force_next_flush()`.execute(db);
  await sql`select 1`.execute(db);
  const { rows: stat } = await sql<{ relname: string; n_tup_upd: string; n_tup_hot_upd: string }>`
    select relname, n_tup_upd, n_tup_hot_upd from pg_stat_user_tables
    where relname in ('webhook_deliveries', 'webhook_outbox', 'webhook_endpoint_slots') and schemaname = ${schema}`.execute(
    admin.db,
  );
  out.updates = Object.fromEntries(stat.map((row) => [row.relname, `${row.n_tup_hot_upd}/${row.n_tup_upd} HOT`]));
  console.log(JSON.stringify(out));
} finally {
  await database.close();
  await sql`drop schema ${sql.id(schema)} cascade`.execute(admin.db);
  await admin.close();
}
