/**
 * Micro-benchmark of a lane's claim alone (no HTTP, no Redis): `claims` deliveries of one endpoint claimed
 * one by one, as a lane at a low steady rate claims each work entry as it arrives. Prints PostgreSQL backend
 * CPU, this process's CPU and wall µs per claim, for two plan settings side by side, alternating rounds:
 *
 * - `generic`: the claim function's plan made once per connection (`plan_cache_mode = force_generic_plan`,
 *   what the migration sets on it);
 * - `custom`: PostgreSQL's default (`auto`), which judged each call's own plan cheaper and planned the claim
 *   again at every call.
 *
 * The throw-away schema's function has its own setting removed, so each connection's session setting
 * decides. Each connection claims from its own endpoint's deliveries (leases of 1 ms, so the slots they
 * take are expired by the next claim). The client's CPU includes the vacuums' round trips.
 *
 *   node --import tsx bench/micro/claim-micro.ts [claims=2000] [rounds=4]
 */
import { readFileSync } from 'node:fs';
import { createDatabase, migrateToLatest, sealSecret } from '@herald/db';
import { claimDeliveries, fanOutOutbox } from '@herald/webhook-engine';
import { sql } from 'kysely';

const claims = Number(process.argv[2] ?? 2000);
const rounds = Number(process.argv[3] ?? 4);
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `claim_micro_${process.pid}`;
/** Seals the endpoints' secrets (nothing here opens them). */
const MICRO_KEYRING = [{ id: 'micro', key: Buffer.alloc(32, 1) }] as const;
const SETTINGS = ['generic', 'custom'] as const;
/**
 * Each claim's lane is new (and its 1 ms lease past by the next claim), so each leaves a dead slot
 * registration: vacuumed every this many claims (outside the timings, on another connection), as autovacuum
 * would; without it the registrations' index grows with every claim.
 */
const VACUUM_EVERY = 100;

const admin = await createDatabase({ kind: 'postgres', url: base, poolMax: 1 });
await sql`create schema ${sql.id(schema)}`.execute(admin.db);

function connect(planCacheMode: string) {
  const url = new URL(base);
  const explain = process.env.EXPLAIN_MS
    ? ` -c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=${process.env.EXPLAIN_MS}` +
      ' -c auto_explain.log_nested_statements=on -c auto_explain.log_analyze=on'
    : '';
  url.searchParams.set('options', `-c search_path=${schema} -c plan_cache_mode=${planCacheMode}${explain}`);
  url.searchParams.set('application_name', 'claim_micro');
  return createDatabase({ kind: 'postgres', url: url.toString(), poolMax: 1, preparedStatements: true });
}

const cpuOf = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100;
};

try {
  const generic = await connect('force_generic_plan');
  const custom = await connect('auto');
  await migrateToLatest(generic.db);
  await sql`alter function herald_webhook_claim(text[], text[], text[], text[], boolean, integer, text, double precision)
    reset plan_cache_mode`.execute(generic.db);
  const sides = { generic, custom };
  const queued: Record<string, Awaited<ReturnType<typeof fanOutOutbox>>['queued']> = { generic: [], custom: [] };
  for (const side of SETTINGS) {
    const endpoint = `we_${side}`;
    await sql`insert into webhook_endpoints (id, org_id, url, event_types)
      values (${endpoint}, ${`org-${side}`}, 'http://127.0.0.1:9/x', '{post.published}')`.execute(generic.db);
    await sql`insert into webhook_endpoint_secrets (endpoint_id, sealed_secret)
      values (${endpoint}, ${sealSecret(MICRO_KEYRING, endpoint, `whsec_${side}`)})`.execute(generic.db);
    await sql`insert into webhook_outbox (id, org_id, type, body)
      select ${`evt_${side}_`} || g, ${`org-${side}`}, 'post.published', '{"a":1}'
      from generate_series(1, ${claims * rounds}) g`.execute(generic.db);
  }
  for (;;) {
    const fan = await fanOutOutbox(generic.db, { limit: 500, queueLeaseMs: 600_000 });
    if (fan.events === 0) break;
    for (const item of fan.queued) {
      const side = item.endpointId === 'we_generic' ? 'generic' : 'custom';
      queued[side]!.push(item);
    }
  }
  await sql`analyze`.execute(generic.db);
  const totals = Object.fromEntries(SETTINGS.map((s) => [s, { pg: 0, client: 0, wall: 0, claimed: 0 }]));
  for (let round = 0; round < rounds; round++) {
    for (const side of round % 2 === 0 ? SETTINGS : [...SETTINGS].reverse()) {
      const { db } = sides[side];
      const pid = (await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db)).rows[0]!.pid;
      const items = queued[side]!.slice(round * claims, (round + 1) * claims);
      let pg = 0;
      let wall = 0;
      const client0 = process.cpuUsage();
      for (let at = 0; at < items.length; at += VACUUM_EVERY) {
        const pg0 = cpuOf(pid);
        const wall0 = performance.now();
        for (const item of items.slice(at, at + VACUUM_EVERY)) {
          totals[side]!.claimed += (await claimDeliveries(db, { queued: [item], endpointCap: 10, leaseMs: 1 })).length;
        }
        wall += (performance.now() - wall0) * 1000;
        pg += cpuOf(pid) - pg0;
        await sql`vacuum ${sql.id(schema, 'webhook_endpoint_slots')}`.execute(admin.db);
      }
      const client = process.cpuUsage(client0);
      console.log(`round ${round + 1} ${side}: PostgreSQL ${Math.round(pg / items.length)} µs/claim`);
      totals[side]!.wall += wall;
      totals[side]!.pg += pg;
      totals[side]!.client += client.user + client.system;
    }
  }
  for (const side of SETTINGS) {
    const t = totals[side]!;
    const n = claims * rounds;
    console.log(
      `${side.padEnd(8)} claimed ${t.claimed}/${n}  PostgreSQL ${Math.round(t.pg / n)} µs/claim  ` +
        `client ${Math.round(t.client / n)} µs/claim  wall ${Math.round(t.wall / n)} µs/claim`,
    );
  }
  await generic.close();
  await custom.close();
} finally {
  await sql`drop schema ${sql.id(schema)} cascade`.execute(admin.db);
  await admin.close();
}
