/**
 * What endpoint filters cost the fan-out statement (lease-protocol.ts, step 1): one organisation with
 * `endpoints` endpoints selecting `post.published`, `events` outbox events fanned out 200 per statement,
 * with no filter on any endpoint, with a filter on every endpoint that keeps every event
 * (`{"data":{"tags":["x"]}}`: the cost of parsing and matching alone), and with one that keeps every
 * other event (`{"data":{"tags":["urgent"]}}`). Rounds alternate the three, on one connection; prints
 * wall ms and PostgreSQL backend CPU µs per event, and deliveries made, median of rounds.
 *
 *   node --import tsx bench/micro/fan-out-filter-micro.ts [events=2000] [endpoints=10] [rounds=3]
 *
 * On the 2-core development machine (shared, local PostgreSQL 15), 2000 events, 10 endpoints: no filter
 * 145–155 µs of PostgreSQL CPU per event, filters keeping all 160–175 (so ~1.5–2 µs per event and
 * filtered endpoint to parse the body and test containment), keeping half 90–100 (a filtered-out
 * endpoint costs no delivery row).
 */
import { readFileSync } from 'node:fs';
import { newEventId } from '@herald/contracts';
import { createDatabase, migrateToLatest } from '@herald/db';
import { fanOutOutbox } from '@herald/webhook-engine';
import { sql } from 'kysely';

const events = Number(process.argv[2] ?? 2000);
const endpoints = Number(process.argv[3] ?? 10);
const rounds = Number(process.argv[4] ?? 3);
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `fan_out_filter_micro_${process.pid}`;
const admin = await createDatabase({ kind: 'postgres', url: base, poolMax: 1 });
await sql`create schema ${sql.id(schema)}`.execute(admin.db);
const url = new URL(base);
url.searchParams.set('options', `-c search_path=${schema}`);
const database = await createDatabase({ kind: 'postgres', url: url.toString(), poolMax: 1 });
const db = database.db;
const median = (list: number[]) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)]!;
const cpuOf = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100;
};

async function round(filter: string | null, pid: number) {
  await sql`truncate webhook_outbox, webhook_deliveries`.execute(db);
  await sql`update webhook_endpoints set filter = ${filter}::jsonb`.execute(db);
  const created = new Date().toISOString();
  const rows = Array.from({ length: events }, (_, i) => {
    const id = newEventId();
    const data = { id: `p${i}`, orgId: 'micro', title: `post ${i}`, tags: i % 2 ? ['urgent', 'x'] : ['x'] };
    const post = { ...data, status: 'PUBLISHED', publishedAt: created, author: { id: 'u', name: 'U' } };
    return {
      id,
      org_id: 'micro',
      type: 'post.published',
      body: JSON.stringify({ id, type: 'post.published', created, data: post }),
    };
  });
  for (let i = 0; i < rows.length; i += 500)
    await db
      .insertInto('webhook_outbox')
      .values(rows.slice(i, i + 500))
      .execute();
  await sql`analyze webhook_outbox`.execute(db);
  const cpuBefore = cpuOf(pid);
  const startedAt = performance.now();
  let done = 0;
  let deliveries = 0;
  while (done < events) {
    const result = await fanOutOutbox(db, { limit: 200, queueLeaseMs: 60_000 });
    done += result.events;
    deliveries += result.queued.length;
  }
  return {
    wallMsPerEvent: (performance.now() - startedAt) / events,
    cpuUsPerEvent: (cpuOf(pid) - cpuBefore) / events,
    deliveries,
  };
}

try {
  await migrateToLatest(db);
  const { rows: pidRows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db);
  const pid = pidRows[0]!.pid;
  for (let i = 0; i < endpoints; i++) {
    await sql`insert into webhook_endpoints (id, org_id, url, event_types)
      values (${`we_micro_${i}`}, 'micro', 'http://127.0.0.1:9/', '{post.published}')`.execute(db);
  }
  const variants: Record<string, string | null> = {
    none: null,
    'keeps all': '{"data":{"tags":["x"]}}',
    'keeps half': '{"data":{"tags":["urgent"]}}',
  };
  const results: Record<string, Array<Awaited<ReturnType<typeof round>>>> = Object.fromEntries(
    Object.keys(variants).map((name) => [name, []]),
  );
  for (let r = 0; r < rounds; r++) {
    for (const [name, filter] of Object.entries(variants)) results[name]!.push(await round(filter, pid));
  }
  console.log(`events=${events} endpoints=${endpoints} rounds=${rounds} (median)`);
  console.log('| filters | wall ms/event | PostgreSQL CPU µs/event | deliveries |\n| --- | --- | --- | --- |');
  for (const [name, list] of Object.entries(results)) {
    const wall = median(list.map((item) => item.wallMsPerEvent));
    const cpu = median(list.map((item) => item.cpuUsPerEvent));
    console.log(`| ${name} | ${wall.toFixed(3)} | ${cpu.toFixed(0)} | ${list[0]!.deliveries} |`);
  }
} finally {
  await database.close();
  await sql`drop schema ${sql.id(schema)} cascade`.execute(admin.db);
  await admin.close();
}
