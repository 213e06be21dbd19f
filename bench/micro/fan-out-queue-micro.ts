/**
 * The fan-out's pending-fan-out queue (migration 2026-12-02T08-00_webhook-outbox-pending, proposal 6b of
 * bench/results/webhooks-row-versions/README.md) against the fan-out before it, which marked each outbox row
 * `dispatched_at` (a non-HOT update): two schemas, one migrated to the migration before the queue (`mark`),
 * one to the latest (`queue`), one connection each; rounds alternate which goes first. Both publish the same
 * outbox rows (the queue's trigger adds its rows) and run their own fan-out function. Prints PostgreSQL
 * backend CPU µs per event for the fan-out and for the publish-side inserts.
 *
 *   node --import tsx bench/micro/fan-out-queue-micro.ts [events=10000] [rounds=4] [batch=500] [per-statement=100]
 *
 * `per-statement` 1 publishes as the API does (one event per statement: the queue's trigger runs per event).
 *
 * Before the queue was built this micro priced it with a prototype function (bench/results/
 * webhooks-fan-out-window/, section 3); it now runs the migrations themselves.
 */
import { readFileSync } from 'node:fs';
import { createDatabase, migrateToLatest } from '@herald/db';
import { migrateTestDatabaseTo } from '@herald/db/testing';
import { type Kysely, sql } from 'kysely';
import { microPostBody } from './post-body.js';

const events = Number(process.argv[2] ?? 10_000);
const rounds = Number(process.argv[3] ?? 4);
const batch = Number(process.argv[4] ?? 500);
const perStatement = Number(process.argv[5] ?? 100);
/** The last migration before the queue. */
const BEFORE_QUEUE = '2026-12-01T12-00_webhook-claim-functions';
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const admin = await createDatabase({ kind: 'postgres', url: base, poolMax: 1 });
const cpuOf = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100;
};
const body = microPostBody();

type Variant = 'mark' | 'queue';
interface Side {
  variant: Variant;
  schema: string;
  db: Kysely<never>;
  pid: number;
  close(): Promise<void>;
}

async function open(variant: Variant, round: number): Promise<Side> {
  const schema = `fan_out_queue_micro_${process.pid}_${variant}_${round}`;
  await sql`create schema ${sql.id(schema)}`.execute(admin.db);
  const url = new URL(base);
  url.searchParams.set('options', `-c search_path=${schema}`);
  const database = await createDatabase({ kind: 'postgres', url: url.toString(), poolMax: 1 });
  const db = database.db as unknown as Kysely<never>;
  if (variant === 'mark') await migrateTestDatabaseTo(database.db, BEFORE_QUEUE);
  else await migrateToLatest(database.db);
  await sql`insert into webhook_endpoints (id, org_id, url, event_types)
    values ('we_micro', 'micro', 'http://127.0.0.1:9/', '{post.published}')`.execute(db);
  const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db);
  return {
    variant,
    schema,
    db,
    pid: rows[0]!.pid,
    async close() {
      await database.close();
      await sql`drop schema ${sql.id(schema)} cascade`.execute(admin.db);
    },
  };
}

/** The publish side: the outbox rows, `perStatement` per statement (with the queue, its trigger adds the queue rows). */
async function publish(side: Side): Promise<number> {
  const before = cpuOf(side.pid);
  for (let from = 1; from <= events; from += perStatement) {
    const to = Math.min(events, from + perStatement - 1);
    await sql`insert into webhook_outbox (id, org_id, type, body)
      select 'evt_micro' || n, 'micro', 'post.published', ${body} from generate_series(${from}::int, ${to}::int) n`.execute(
      side.db,
    );
  }
  return (cpuOf(side.pid) - before) / events;
}

async function fanOut(side: Side): Promise<number> {
  const before = cpuOf(side.pid);
  let fanned = 0;
  for (;;) {
    const { rows } = await sql<{
      events: number | null;
    }>`select events from herald_webhook_fan_out(${batch}, 'q:micro', 15000, 'whd_')`.execute(side.db);
    const count = rows.find((row) => row.events !== null)?.events ?? 0;
    if (count === 0) break;
    fanned += count;
  }
  if (fanned !== events) throw new Error(`${side.variant}: fanned out ${fanned} of ${events} events`);
  const { rows } = await sql<{ n: number }>`select count(1)::int as n from webhook_deliveries`.execute(side.db);
  if (rows[0]!.n !== events) throw new Error(`${side.variant}: ${rows[0]!.n} deliveries for ${events} events`);
  return (cpuOf(side.pid) - before) / events;
}

const results: Record<Variant, { publish: number[]; fanOut: number[] }> = {
  mark: { publish: [], fanOut: [] },
  queue: { publish: [], fanOut: [] },
};
for (let round = 0; round < rounds; round++) {
  const order: Variant[] = round % 2 === 0 ? ['mark', 'queue'] : ['queue', 'mark'];
  for (const variant of order) {
    const side = await open(variant, round);
    try {
      results[variant].publish.push(Math.round(await publish(side)));
      results[variant].fanOut.push(Math.round(await fanOut(side)));
    } finally {
      await side.close();
    }
  }
}
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
console.log(
  JSON.stringify({
    events,
    batch,
    perStatement,
    rounds,
    pgCpuUsPerEvent: Object.fromEntries(
      Object.entries(results).map(([variant, r]) => [
        variant,
        { publish: r.publish, fanOut: r.fanOut, medians: { publish: median(r.publish), fanOut: median(r.fanOut) } },
      ]),
    ),
  }),
);
await admin.close();
