import { randomUUID } from 'node:crypto';
import { createDatabase, type HeraldDatabase, isDatabaseUnavailableError } from '@herald/db';
import { waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type ApiOnOwnPostgres, POSTS_QUERY as POSTS, startApiOnOwnPostgres } from './support/api-on-own-postgres.js';
import type { ApiProcess } from './support/api-process.js';
import { startDispatcherProcess } from './support/dispatcher-process.js';
import { postGraphql } from './support/graphql-http.js';
import type { OwnPostgres } from './support/postgres-cluster.js';

// A PostgreSQL server that stops answering without closing its connections (SIGSTOP: a hung host, a
// partition that drops packets). TCP keep-alive sees nothing, statement_timeout is never enforced: only
// the client-side query deadline (DATABASE_QUERY_TIMEOUT_MS) turns the hang into a clear 503.

const JWT_SECRET = 'postgres-freeze-test-secret-0123456789abcdef';
const QUERY_TIMEOUT_MS = 2_000;
const SHUTDOWN_GRACE_MS = 3_000;
/** The API's hard bound (drain 0 + grace + 5 s) with slack for a busy machine; the dispatcher's is less. */
const EXIT_BOUND_MS = SHUTDOWN_GRACE_MS + 5_000 + 5_000;

let setup: ApiOnOwnPostgres | undefined;
let cluster: OwnPostgres;
let api: ApiProcess;
let database: HeraldDatabase;
let token: string;
let ORG: string;

beforeAll(async () => {
  setup = await startApiOnOwnPostgres(JWT_SECRET, {
    DATABASE_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS),
    SHUTDOWN_GRACE_MS: String(SHUTDOWN_GRACE_MS),
  });
  ({ cluster, api, token, orgId: ORG } = setup);
  database = await createDatabase({
    kind: 'postgres',
    url: setup.own.url,
    poolMax: 2,
    queryTimeoutMs: QUERY_TIMEOUT_MS,
  });
}, 180_000);

const select = (n: number) => database.db.selectNoFrom((eb) => eb.val(n).as('n')).execute();

afterAll(async () => {
  await cluster?.thaw().catch(() => {});
  await database?.close();
  await setup?.stop();
});

describe('a PostgreSQL server that freezes with its connections open', () => {
  it('fails pooled queries as "database unavailable" instead of hanging, then serves again after the thaw', async () => {
    // Both pooled connections open and idle before the freeze, as on a busy pod.
    await Promise.all([select(1), select(2)]);
    await cluster.freeze();
    try {
      const failures = await Promise.allSettled([select(1), select(2), select(3)]);
      for (const failure of failures) {
        expect(failure.status).toBe('rejected');
        expect(isDatabaseUnavailableError((failure as PromiseRejectedResult).reason)).toBe(true);
      }
    } finally {
      await cluster.thaw();
    }
    // The timed-out connections were replaced, not left waiting behind their abandoned queries.
    for (let i = 0; i < 4; i++) {
      expect(await select(i)).toEqual([{ n: String(i) }]);
    }
  });

  it('answers GraphQL with 503 SERVICE_UNAVAILABLE and readiness 503 while frozen, and recovers by itself', async () => {
    expect((await postGraphql(api.baseUrl, token, POSTS, { orgId: ORG })).status).toBe(200);
    await cluster.freeze();
    try {
      const answer = await postGraphql(api.baseUrl, token, POSTS, { orgId: ORG });
      expect(answer.status).toBe(503);
      expect(answer.body.errors?.map((error) => error.extensions?.code)).toEqual(['SERVICE_UNAVAILABLE']);
      expect((await fetch(`${api.baseUrl}/readiness`)).status).toBe(503);
      expect((await fetch(`${api.baseUrl}/health`)).status).toBe(200);
    } finally {
      await cluster.thaw();
    }
    await waitFor('readiness 200', async () => (await fetch(`${api.baseUrl}/readiness`)).status === 200, {
      timeoutMs: 30_000,
      intervalMs: 200,
    });
    const again = await postGraphql(api.baseUrl, token, POSTS, { orgId: ORG });
    expect(again.status).toBe(200);
    expect(again.body.errors).toBeUndefined();
    expect(api.child.exitCode).toBeNull();
  });

  it('ends the API and a dispatcher within their bound on one SIGTERM while PostgreSQL stays frozen', async () => {
    const dispatcher = await startDispatcherProcess({
      DATABASE_URL: setup!.own.url,
      REDIS_URL: inject('redisUrl'),
      HERALD_REDIS_PREFIX: `herald-freeze-${randomUUID()}:`,
      SHUTDOWN_GRACE_MS: String(SHUTDOWN_GRACE_MS),
    });
    await cluster.freeze();
    try {
      // A request in flight on the frozen server while the signal arrives.
      const inFlight = postGraphql(api.baseUrl, token, POSTS, { orgId: ORG }).catch(() => undefined);
      const exits = [api, dispatcher].map(async (herald) => {
        const started = Date.now();
        const timer = setTimeout(() => herald.child.kill('SIGKILL'), EXIT_BOUND_MS);
        const code = await herald.stop('SIGTERM');
        clearTimeout(timer);
        return { code, ms: Date.now() - started, signal: herald.child.signalCode };
      });
      for (const exit of await Promise.all(exits)) {
        // Exited by itself (0: stopped in time, 1: its hard bound cut a close the frozen server never answered).
        expect(exit.signal).toBeNull();
        expect([0, 1]).toContain(exit.code);
        expect(exit.ms).toBeLessThan(EXIT_BOUND_MS);
      }
      await inFlight;
    } finally {
      await cluster.thaw();
    }
  }, 120_000);
});
