import { createDatabase, type HeraldDatabase } from '@herald/db';
import { waitFor } from '@herald/testing/ports';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';
import { SHARED_FOR_MS } from './operation-turns.js';

// An organisation's HTTP operations take turns on the pod (TENANT_CONCURRENT_OPERATIONS_PER_POD, here 1),
// through a real server on PostgreSQL: the `posts` table is locked by the test, so a posts query that
// reaches the database waits there, and the lock's queue shows how many did.

const POSTS = 'query($orgId: ID!) { posts(orgId: $orgId, first: 1) { edges { node { id } } } }';

let api: TestApi;
/** The test's own connections: one holds the lock, one reads the lock's queue. */
let locker: HeraldDatabase;

beforeAll(async () => {
  api = await startTestApi({
    databaseUrl: inject('databaseUrl'),
    listen: true,
    env: { TENANT_CONCURRENT_OPERATIONS_PER_POD: '1' },
  });
  locker = await createDatabase({ kind: 'postgres', url: (api.config.database as { url: string }).url, poolMax: 2 });
});

afterAll(async () => {
  await locker?.close();
  await api?.close();
});

/** How a request is executed: compiled by the HTTP fast path, or by Yoga. */
type Door = 'fast path' | 'yoga';

function query(door: Door, token: string, orgId: string, signal?: AbortSignal): Promise<Response> {
  // A parameter the fast path leaves to Yoga (`extensions`) sends the request through Yoga instead.
  const extensions = door === 'yoga' ? { extensions: { via: 'yoga' } } : {};
  return fetch(`${api.baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: POSTS, variables: { orgId }, ...extensions }),
    signal,
  });
}

/** Queries waiting for the test's lock on `posts`: those that reached PostgreSQL. */
async function atTheDatabase(): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from pg_locks where relation = 'posts'::regclass and not granted`.execute(locker.db);
  return rows[0]!.n;
}

/** Locks `posts` on one connection of the test's own. @returns the function that commits (unlocks) */
async function lockPosts(): Promise<() => Promise<void>> {
  let unlock!: () => void;
  const unlocked = new Promise<void>((resolve) => {
    unlock = resolve;
  });
  let locked!: () => void;
  const isLocked = new Promise<void>((resolve) => {
    locked = resolve;
  });
  const held = locker.db.connection().execute(async (connection) => {
    await sql`begin`.execute(connection);
    await sql`lock table posts in access exclusive mode`.execute(connection);
    locked();
    await unlocked;
    await sql`commit`.execute(connection);
  });
  await Promise.race([isLocked, held]);
  return async () => {
    unlock();
    await held;
  };
}

async function metric(prefix: string): Promise<number> {
  const metrics = await (await api.fetch('/metrics')).text();
  const line = metrics.split('\n').find((row) => row.startsWith(prefix));
  return Number(line?.split(' ')[1] ?? Number.NaN);
}

const waited = () => metric('herald_tenant_operations_waited_total ');
const compiled = () => metric('herald_http_requests_total{route="compiled"} ');

describe('operation turns over HTTP', () => {
  it.each<Door>(['fast path', 'yoga'])(
    "holds one organisation to its turns on the pod without holding another's operations (%s)",
    async (door) => {
      const tokenA = await api.token({ sub: 'a', orgs: ['org-turns-a'] });
      const tokenB = await api.token({ sub: 'b', orgs: ['org-turns-b'] });
      // Both documents known to the fast path before the lock.
      expect((await query(door, tokenA, 'org-turns-a')).status).toBe(200);
      expect((await query(door, tokenB, 'org-turns-b')).status).toBe(200);
      const waitedBefore = await waited();
      const compiledBefore = await compiled();

      const unlock = await lockPosts();
      try {
        // B has a query running: A shares the pod and is held to its one turn (alone, it would get the
        // pool's ten; the next test).
        const bRunning = query(door, tokenB, 'org-turns-b');
        await waitFor('B’s first query at the database', async () => (await atTheDatabase()) === 1);
        const first = query(door, tokenA, 'org-turns-a');
        await waitFor('A’s first query at the database', async () => (await atTheDatabase()) === 2);
        const leaving = new AbortController();
        const gone = query(door, tokenA, 'org-turns-a', leaving.signal).catch((error: Error) => error);
        const rest = [query(door, tokenA, 'org-turns-a'), query(door, tokenA, 'org-turns-a')];
        await waitFor('A’s three others waiting their turn', async () => (await waited()) - waitedBefore === 3);
        // B is not behind A's queue: its query goes straight to the database.
        const b = query(door, tokenB, 'org-turns-b');
        await waitFor('B’s query at the database', async () => (await atTheDatabase()) === 3);
        // A's waiting ones never reached it.
        expect(await atTheDatabase()).toBe(3);

        // One of A's waiting clients leaves: its place is given back without taking a turn.
        leaving.abort();
        expect(await gone).toBeInstanceOf(Error);
        await unlock();

        for (const answer of [await bRunning, await first, ...(await Promise.all(rest)), await b]) {
          expect(answer.status).toBe(200);
          expect((await answer.json()).errors).toBeUndefined();
        }
        // No turn leaked: with one turn per organisation, A's next query still runs.
        expect((await query(door, tokenA, 'org-turns-a')).status).toBe(200);
        expect(api.app.quotas.turns.waiting).toBe(0);
        expect(api.app.quotas.turns.tenants).toBe(0);
        // Each door was the one taken: compiled answers only on the fast path.
        if (door === 'yoga') expect(await compiled()).toBe(compiledBefore);
        else expect(await compiled()).toBeGreaterThanOrEqual(compiledBefore + 7);
      } finally {
        await unlock();
      }
    },
  );

  /** A has run a query and nobody else has asked for a second since: A is alone on the pod. */
  async function aloneOnThePod() {
    const tokenA = await api.token({ sub: 'a', orgs: ['org-turns-a'] });
    const tokenB = await api.token({ sub: 'b', orgs: ['org-turns-b'] });
    expect((await query('fast path', tokenA, 'org-turns-a')).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, SHARED_FOR_MS + 100));
    return { tokenA, tokenB, waitedBefore: await waited() };
  }

  it('lets an organisation alone on the pod use the pool, and holds it to its turn once another arrives', async () => {
    const { tokenA, tokenB, waitedBefore } = await aloneOnThePod();

    const unlock = await lockPosts();
    try {
      const alone = Array.from({ length: 4 }, () => query('fast path', tokenA, 'org-turns-a'));
      await waitFor('A’s four queries at the database', async () => (await atTheDatabase()) === 4);
      expect((await waited()) - waitedBefore).toBe(0);

      const b = query('fast path', tokenB, 'org-turns-b');
      await waitFor('B’s query at the database', async () => (await atTheDatabase()) === 5);
      // Now A shares the pod: its four run on, its next two wait for it to be under one turn again.
      const held = [query('fast path', tokenA, 'org-turns-a'), query('fast path', tokenA, 'org-turns-a')];
      await waitFor('A’s next two waiting', async () => (await waited()) - waitedBefore === 2);
      expect(await atTheDatabase()).toBe(5);

      await unlock();
      for (const answer of await Promise.all([...alone, b, ...held])) expect(answer.status).toBe(200);
      expect(api.app.quotas.turns.waiting).toBe(0);
    } finally {
      await unlock();
    }
  });

  it('leaves one database connection free for the next organisation while another is alone on the pod', async () => {
    const { tokenA, tokenB, waitedBefore } = await aloneOnThePod();

    const unlock = await lockPosts();
    try {
      // The pool has 10 connections (the default): alone, A gets 9 of them; its other 3 wait their turn.
      const alone = Array.from({ length: 12 }, () => query('fast path', tokenA, 'org-turns-a'));
      await waitFor('A’s three beyond nine waiting', async () => (await waited()) - waitedBefore === 3);
      await waitFor('A’s nine queries at the database', async () => (await atTheDatabase()) === 9);
      // B's first request takes the connection left over, with all of A's nine still held.
      const b = query('fast path', tokenB, 'org-turns-b');
      await waitFor('B’s query at the database', async () => (await atTheDatabase()) === 10);

      await unlock();
      for (const answer of await Promise.all([...alone, b])) expect(answer.status).toBe(200);
      expect(api.app.quotas.turns.waiting).toBe(0);
    } finally {
      await unlock();
    }
  });
});
