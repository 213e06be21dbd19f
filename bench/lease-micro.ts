/**
 * Micro-benchmark of the lease protocol's statements alone (no HTTP, no Redis): one endpoint, N events
 * fanned out, then claim → record-with-hand-over cycles of `cap` deliveries until all are recorded.
 * Prints wall ms and PostgreSQL backend CPU µs per delivery, and HOT updates. For comparing schema
 * changes on the same machine in the same run:
 *   node --import tsx bench/lease-micro.ts [events=3000] [cap=10]
 */
import { readFileSync } from 'node:fs';
import { createDatabase, migrateToLatest } from '@herald/db';
import { type ClaimedDelivery, claimDeliveries, fanOutOutbox, recordOutcomes } from '@herald/webhook-engine';
import { sql } from 'kysely';

const events = Number(process.argv[2] ?? 3000);
const cap = Number(process.argv[3] ?? 10);
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `lease_micro_${process.pid}`;
const admin = await createDatabase({ kind: 'postgres', url: base, poolMax: 1 });
await sql`create schema ${sql.id(schema)}`.execute(admin.db);
const url = new URL(base);
url.searchParams.set('options', `-c search_path=${schema}`);
const database = await createDatabase({
  kind: 'postgres',
  url: url.toString(),
  poolMax: 1,
  preparedStatements: !!process.env.PREP,
});
const cpuOf = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100;
};
try {
  await migrateToLatest(database.db);
  if (process.env.EXTRA_SQL) await sql.raw(process.env.EXTRA_SQL).execute(database.db);
  const { rows: pidRows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(database.db);
  const pid = pidRows[0]!.pid;
  await sql`insert into webhook_endpoints (id, org_id, url, event_types) values ('we_micro', 'micro', 'http://127.0.0.1:9/', '{post.published}')`.execute(
    database.db,
  );
  await sql`insert into webhook_endpoint_secrets (endpoint_id, secret) values ('we_micro', 'whsec_x')`
    .execute(database.db)
    .catch(() => {});
  await sql`insert into webhook_outbox (id, org_id, type, body)
    select 'evt_micro' || n, 'micro', 'post.published', '{"id":"x"}' from generate_series(1, ${events}) n`.execute(
    database.db,
  );
  if (process.env.EXPLAIN) await sql`load 'auto_explain'`.execute(database.db);
  const t0 = performance.now();
  const c0 = cpuOf(pid);
  const queued = [];
  for (;;) {
    const fan = await fanOutOutbox(database.db, { limit: 200, queueLeaseMs: 15_000 });
    queued.push(...fan.queued);
    if (fan.events === 0) break;
  }
  const t1 = performance.now();
  const c1 = cpuOf(pid);
  const own1 = process.cpuUsage();
  let claimed: ClaimedDelivery[] = await claimDeliveries(database.db, {
    queued: queued.slice(0, cap),
    chainEndpoints: ['we_micro'],
    endpointCap: cap,
    leaseMs: 15_000,
  });
  let done = 0;
  let claims = 1;
  let cycles = 0;
  while (claimed.length > 0) {
    cycles++;
    if (process.env.EXPLAIN && cycles === 50)
      await sql`select set_config('auto_explain.log_min_duration', '0', false), set_config('auto_explain.log_analyze', 'on', false), set_config('auto_explain.log_nested_statements', 'on', false), set_config('auto_explain.log_buffers', 'on', false)`.execute(
        database.db,
      );
    if (process.env.EXPLAIN && cycles === 51)
      await sql`select set_config('auto_explain.log_min_duration', '-1', false)`.execute(database.db);
    const result = await recordOutcomes(
      database.db,
      claimed.map((d) => ({
        deliveryId: d.id,
        endpointId: d.endpointId,
        lease: d.lease,
        at: new Date(),
        statusCode: 200,
        durationMs: 1,
        error: null,
        responseBody: null,
        next: { status: 'SUCCEEDED' as const },
        health: 'success' as const,
      })),
      { disableAfterMs: 86_400_000, handOver: { endpointId: 'we_micro', leaseMs: 15_000 } },
    );
    done += claimed.length;
    claimed = result.handedOver;
    if (claimed.length === 0 && done < events) {
      claims++;
      claimed = await claimDeliveries(database.db, {
        queued: [],
        chainEndpoints: ['we_micro'],
        endpointCap: cap,
        leaseMs: 15_000,
      });
    }
  }
  const t2 = performance.now();
  const c2 = cpuOf(pid);
  const own = process.cpuUsage(own1);
  const { rows: stat } = await sql<{ n_tup_upd: string; n_tup_hot_upd: string }>`
    select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables where relname = 'webhook_deliveries' and schemaname = ${schema}`.execute(
    database.db,
  );
  console.log(
    JSON.stringify({
      events,
      cap,
      done,
      claims,
      fanOut: { msPerDelivery: +((t1 - t0) / events).toFixed(4), pgCpuUs: +((c1 - c0) / events).toFixed(1) },
      cycle: {
        msPerDelivery: +((t2 - t1) / done).toFixed(4),
        pgCpuUs: +((c2 - c1) / done).toFixed(1),
        clientCpuUs: +((own.user + own.system) / done).toFixed(1),
        deliveriesPerSec: Math.round(done / ((t2 - t1) / 1000)),
      },
      updates: stat[0],
    }),
  );
} finally {
  await database.close();
  await sql`drop schema ${sql.id(schema)} cascade`.execute(admin.db);
  await admin.close();
}
