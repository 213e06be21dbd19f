import { createDatabase, type HeraldDatabase, isDatabaseUnavailableError } from '@herald/db';
import { waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiOnOwnPostgres, POSTS_QUERY as POSTS, startApiOnOwnPostgres } from './support/api-on-own-postgres.js';
import type { ApiProcess } from './support/api-process.js';
import { postGraphql } from './support/graphql-http.js';
import type { OwnPostgres } from './support/postgres-cluster.js';

// A PostgreSQL server that stops answering without closing its connections (SIGSTOP: a hung host, a
// partition that drops packets). TCP keep-alive sees nothing, statement_timeout is never enforced: only
// the client-side query deadline (DATABASE_QUERY_TIMEOUT_MS) turns the hang into a clear 503.

const JWT_SECRET = 'postgres-freeze-test-secret-0123456789abcdef';
const QUERY_TIMEOUT_MS = 2_000;

let setup: ApiOnOwnPostgres | undefined;
let cluster: OwnPostgres;
let api: ApiProcess;
let database: HeraldDatabase;
let token: string;
let ORG: string;

beforeAll(async () => {
  setup = await startApiOnOwnPostgres(JWT_SECRET, { DATABASE_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS) });
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
});
