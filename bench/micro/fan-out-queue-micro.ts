/**
 * Prices a design before anyone builds it: the fan-out reading its batch from a narrow pending-fan-out
 * queue whose rows it deletes (`webhook_outbox_pending`, proposal 6b of
 * bench/results/webhooks-row-versions/README.md), against today's fan-out, which marks each outbox row
 * `dispatched_at` (a non-HOT update). Both run the same delivery insert. Two schemas migrated alike, one
 * connection each; rounds alternate which goes first. Prints PostgreSQL backend CPU µs per event for the
 * fan-out and for the publish-side inserts (outbox rows alone, outbox rows and their queue rows).
 *
 *   node --import tsx bench/micro/fan-out-queue-micro.ts [events=10000] [rounds=4] [batch=500]
 *
 * The queue variant is a prototype function created here, not a migration: nothing in the engine uses it.
 */
import { readFileSync } from 'node:fs';
import { createDatabase, migrateToLatest } from '@herald/db';
import { type Kysely, sql } from 'kysely';
import { microPostBody } from './post-body.js';

const events = Number(process.argv[2] ?? 10_000);
const rounds = Number(process.argv[3] ?? 4);
const batch = Number(process.argv[4] ?? 500);
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
  await migrateToLatest(database.db);
  await sql`insert into webhook_endpoints (id, org_id, url, event_types)
    values ('we_micro', 'micro', 'http://127.0.0.1:9/', '{post.published}')`.execute(db);
  if (variant === 'queue') {
    await sql`create table webhook_outbox_pending (seq bigint primary key, id text not null)`.execute(db);
    // Today's function, read back from the database, with its first CTE replaced: the batch is deleted
    // from the queue and the outbox rows are only read. The rest (the delivery insert, the settings) is
    // today's, whatever later migrations made of it.
    const { rows } = await sql<{ def: string }>`
      select pg_get_functiondef('herald_webhook_fan_out'::regproc) as def`.execute(db);
    const today = rows[0]!.def;
    const markCte =
      /with event as \(\s*update webhook_outbox outbox set dispatched_at = now\(\)[\s\S]*?\n\s*\), created as \(/;
    if (!markCte.test(today)) throw new Error('herald_webhook_fan_out no longer has the CTE this prototype replaces');
    const queued = today.replace('herald_webhook_fan_out(', 'herald_webhook_fan_out_queue(').replace(
      markCte,
      `with picked as (
          delete from webhook_outbox_pending pending
          where pending.seq = any(array(
            select due.seq from webhook_outbox_pending due order by due.seq limit batch for update skip locked
          ))
          returning pending.id
        ), event as (
          select outbox.id, outbox.seq, outbox.org_id, outbox.type, outbox.body, outbox.target_endpoint_id,
            outbox.exclude_endpoint_id, outbox.traceparent
          from picked join webhook_outbox outbox on outbox.id = picked.id
        ), created as (`,
    );
    await sql.raw(queued).execute(db);
  }
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

/** The publish side: the outbox rows (and, for the queue, their queue rows), 100 per statement. */
async function publish(side: Side): Promise<number> {
  const before = cpuOf(side.pid);
  for (let from = 1; from <= events; from += 100) {
    const to = Math.min(events, from + 99);
    if (side.variant === 'mark') {
      await sql`insert into webhook_outbox (id, org_id, type, body)
        select 'evt_micro' || n, 'micro', 'post.published', ${body} from generate_series(${from}::int, ${to}::int) n`.execute(
        side.db,
      );
    } else {
      await sql`with added as (
          insert into webhook_outbox (id, org_id, type, body)
          select 'evt_micro' || n, 'micro', 'post.published', ${body} from generate_series(${from}::int, ${to}::int) n
          returning id, seq
        ) insert into webhook_outbox_pending (seq, id) select seq, id from added`.execute(side.db);
    }
  }
  return (cpuOf(side.pid) - before) / events;
}

async function fanOut(side: Side): Promise<number> {
  const before = cpuOf(side.pid);
  const fn = side.variant === 'mark' ? 'herald_webhook_fan_out' : 'herald_webhook_fan_out_queue';
  let fanned = 0;
  for (;;) {
    const { rows } = await sql<{
      events: number | null;
    }>`select events from ${sql.raw(fn)}(${batch}, 'q:micro', 15000, 'whd_')`.execute(side.db);
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
