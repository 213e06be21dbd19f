/**
 * What a tenant quota check costs (docs/tenancy.md), beside the operation it guards, in one process:
 *
 * 1. The check alone: `checkOperation` (an allowed operation, and one refused by an organisation over its
 *    quota) and `openSubscription` + `closeSubscription` (a subscribe), with the memory limiters and,
 *    when REDIS_URL is set, with Redis; `concurrency` checks in flight. CPU µs of this process per check,
 *    and wall µs per check for a single caller (a Redis check is one round trip).
 * 2. `posts(first: 10)` with authors over HTTP (the fast path) against a real API on PostgreSQL (single
 *    mode, or cluster mode with REDIS_URL), 16 keep-alive connections, three organisations taking turns:
 *    no quota (an override of 0), a quota never reached, and one over its quota (every request refused
 *    with 429). CPU µs of this process per request; the load client (undici) runs in it too, the same
 *    for every organisation, so differences between rows are the server's.
 *
 *   node --import tsx bench/micro/quota-micro.ts [checks=100000] [requests=5000] [rounds=3]
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Viewer } from '@herald/auth';
import { signToken } from '@herald/auth';
import { createDatabase, migrateToLatest } from '@herald/db';
import { sql } from 'kysely';
import { Pool } from 'undici';
import { createApp } from '../../apps/api/src/app.js';
import { loadApiConfig } from '../../apps/api/src/env.js';
import { createLogger } from '../../apps/api/src/logger.js';
import { MAX_QUOTA_VALUE, type TenantLimits } from '../../apps/api/src/tenancy/quotas.js';
import { createTenantQuotas } from '../../apps/api/src/tenancy/tenant-quotas.js';
import { createRedisClient } from '../../packages/config/src/redis.js';

const checks = Number(process.argv[2] ?? 100_000);
const requests = Number(process.argv[3] ?? 5_000);
const rounds = Number(process.argv[4] ?? 3);
const CONCURRENCY = 64;
const HTTP_CONNECTIONS = 16;
const JWT_SECRET = 'quota-micro-secret-0123456789abcdef0123';
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const redisUrl = process.env.REDIS_URL;
const schema = `quota_micro_${process.pid}`;
const logger = createLogger(process.env.LOG_LEVEL === 'warn' ? 'warn' : 'silent');

const admin = await createDatabase({ kind: 'postgres', url: base, poolMax: 1 });
await sql`create schema ${sql.id(schema)}`.execute(admin.db);
const url = new URL(base);
url.searchParams.set('options', `-c search_path=${schema}`);
const median = (list: number[]) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)]!;
const out = (line: string) => process.stdout.write(`${line}\n`);

async function cpuPer(count: number, concurrency: number, work: () => Promise<unknown>): Promise<number> {
  let left = count;
  const before = process.cpuUsage();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left-- > 0) await work();
    }),
  );
  const used = process.cpuUsage(before);
  return (used.user + used.system) / count;
}

async function wallPer(count: number, work: () => Promise<unknown>): Promise<number> {
  const startedAt = performance.now();
  for (let i = 0; i < count; i++) await work();
  return ((performance.now() - startedAt) * 1000) / count;
}

try {
  const database = await createDatabase({ kind: 'postgres', url: url.toString(), poolMax: 10 });
  await migrateToLatest(database.db);

  // --- 1. the check alone --------------------------------------------------------------------------
  const defaults: TenantLimits = {
    operationsPerSecond: MAX_QUOTA_VALUE,
    publishesPerSecond: 100,
    socketsPerUser: 100,
    subscriptions: MAX_QUOTA_VALUE,
    webhookAttemptsInFlight: 100,
  };
  const viewer: Viewer = {
    id: 'bench',
    name: 'bench',
    orgs: ['org-open', 'org-over'],
    expiresAt: undefined,
    roles: [],
  };
  for (const store of redisUrl ? ['memory', 'redis'] : ['memory']) {
    const redis =
      store === 'redis'
        ? createRedisClient(redisUrl!, { enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout: 250 })
        : undefined;
    if (redis) await new Promise((resolve) => redis.once('ready', resolve));
    const quotas = createTenantQuotas({
      db: database.db,
      defaults,
      redis,
      redisPrefix: `herald-quota-micro-${randomUUID()}:`,
      podId: 'bench-pod',
      logger,
      onRefusal: () => {},
      onFallback: () => {
        fallbacks++;
      },
    });
    await quotas.limits.save('org-over', {
      operationsPerSecond: 1,
      publishesPerSecond: null,
      socketsPerUser: null,
      subscriptions: null,
      webhookAttemptsInFlight: null,
    });
    let fallbacks = 0;
    const allowed = async () => {
      if (await quotas.checkOperation(viewer, 'org-open')) throw new Error('refused');
    };
    const refused = async () => quotas.checkOperation(viewer, 'org-over');
    const subscribe = async () => {
      if (await quotas.openSubscription('org-open')) throw new Error('refused');
      quotas.closeSubscription('org-open');
    };
    await cpuPer(checks / 10, CONCURRENCY, allowed);
    await cpuPer(checks / 10, CONCURRENCY, refused);
    const rows: Record<string, number[]> = { allowed: [], refused: [], subscribe: [] };
    for (let round = 0; round < rounds; round++) {
      rows.allowed!.push(await cpuPer(checks, CONCURRENCY, allowed));
      rows.refused!.push(await cpuPer(checks, CONCURRENCY, refused));
      rows.subscribe!.push(await cpuPer(checks / 10, CONCURRENCY, subscribe));
    }
    const wall = {
      allowed: await wallPer(Math.min(checks, 5_000), allowed),
      refused: await wallPer(Math.min(checks, 5_000), refused),
      subscribe: await wallPer(Math.min(checks, 1_000), subscribe),
    };
    for (const [name, values] of Object.entries(rows)) {
      out(
        `check ${store} ${name}: ${median(values).toFixed(2)} µs CPU/check (rounds ${values.map((v) => v.toFixed(2)).join(', ')}; ${CONCURRENCY} in flight), ${wall[name as keyof typeof wall].toFixed(1)} µs wall/check one at a time`,
      );
    }
    if (fallbacks > 0) out(`check ${store}: ${fallbacks} checks answered locally because Redis failed them`);
    await quotas.stop();
    redis?.disconnect();
  }
  await database.close();

  // --- 2. beside the operation ---------------------------------------------------------------------
  const config = loadApiConfig({
    NODE_ENV: 'production',
    LOG_LEVEL: 'silent',
    HOST: '127.0.0.1',
    PORT: '0',
    JWT_SECRET,
    DATABASE_URL: url.toString(),
    SHUTDOWN_DRAIN_DELAY_MS: '0',
    // The API requires a keyring with PostgreSQL (signing secrets at rest); a throw-away one will do here.
    HERALD_ENCRYPTION_KEYS: `k1:${randomBytes(32).toString('base64')}`,
    HERALD_REDIS_PREFIX: `herald-quota-micro-${randomUUID()}:`,
    ...(redisUrl ? { REDIS_URL: redisUrl } : {}),
  });
  const app = await createApp(config, logger);
  const address = await app.listen();
  const orgs = { none: 'org-none', allowed: 'org-allowed', refused: 'org-refused' } as const;
  try {
    const overrides = {
      publishesPerSecond: null,
      socketsPerUser: null,
      subscriptions: null,
      webhookAttemptsInFlight: null,
    };
    await app.quotas.limits.save(orgs.none, { operationsPerSecond: 0, ...overrides });
    await app.quotas.limits.save(orgs.allowed, { operationsPerSecond: MAX_QUOTA_VALUE, ...overrides });
    await app.quotas.limits.save(orgs.refused, { operationsPerSecond: 1, ...overrides });
    await sql`insert into users (id, name) values ('author-1', 'Ada')`.execute(app.database.db);
    for (const orgId of Object.values(orgs)) {
      await sql`insert into posts (id, org_id, author_id, title, tags)
        select ${orgId} || '-' || n, ${orgId}, 'author-1', 'Post number ' || n, array['news']
        from generate_series(1, 20) n`.execute(app.database.db);
    }
    const token = await signToken(JWT_SECRET, { sub: 'bench', orgs: Object.values(orgs) });
    const pool = new Pool(`http://127.0.0.1:${address.port}`, { connections: HTTP_CONNECTIONS, pipelining: 1 });
    const query =
      'query($orgId: ID!) { posts(orgId: $orgId, first: 10) { edges { node { id title author { name } } } } }';
    const statuses = new Map<number, number>();
    const request = (orgId: string, status: number) => async () => {
      const answer = await pool.request({
        path: '/graphql',
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ query, variables: { orgId } }),
      });
      await answer.body.text();
      statuses.set(answer.statusCode, (statuses.get(answer.statusCode) ?? 0) + 1);
      // Over its quota of 1 a second, one request a second still passes.
      if (answer.statusCode !== status && !(status === 429 && answer.statusCode === 200)) {
        throw new Error(`expected ${status}, got ${answer.statusCode}`);
      }
    };
    const cases = [
      ['no quota', request(orgs.none, 200)],
      ['quota not reached', request(orgs.allowed, 200)],
      ['over quota (429)', request(orgs.refused, 429)],
    ] as const;
    await request(orgs.refused, 200)(); // the one allowed this second, before the refusals
    for (const [, work] of cases) await cpuPer(requests / 5, HTTP_CONNECTIONS, work);
    const rows = new Map<string, number[]>(cases.map(([name]) => [name, []]));
    for (let round = 0; round < rounds; round++) {
      for (const [name, work] of cases) rows.get(name)!.push(await cpuPer(requests, HTTP_CONNECTIONS, work));
    }
    for (const [name, values] of rows) {
      out(
        `http ${config.mode} posts(first: 10), ${name}: ${median(values).toFixed(1)} µs CPU/request (rounds ${values.map((v) => v.toFixed(1)).join(', ')})`,
      );
    }
    out(`http answers: ${[...statuses].map(([status, count]) => `${count} × ${status}`).join(', ')}`);
    await pool.close();
  } finally {
    await app.stop();
  }
} finally {
  await sql`drop schema ${sql.id(schema)} cascade`.execute(admin.db);
  await admin.close();
}
