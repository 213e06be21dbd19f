import { currentStretch, inStretch } from '@herald/telemetry';
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createDatabase, type HeraldDatabase } from './create-database.js';
import { isDatabaseUnavailableError } from './database-unavailable.js';
import { createDialectPool } from './dialect-pool.js';
import { withoutQueryTimeout } from './query-timeout.js';

/** Short enough for a test, long enough that `select 1` on a loaded CI machine never reaches it. */
const QUERY_TIMEOUT_MS = 400;

describe('the query deadline (one sweep per pool)', () => {
  let database: HeraldDatabase;
  const backendPid = async () =>
    (await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(database.db)).rows[0]!.pid;

  beforeAll(async () => {
    // One connection: a timed-out connection left in the pool would make every later query wait.
    database = await createDatabase({
      kind: 'postgres',
      url: inject('databaseUrl'),
      poolMax: 1,
      queryTimeoutMs: QUERY_TIMEOUT_MS,
      preparedStatements: true,
    });
  });

  afterAll(() => database?.close());

  it('fails a query unanswered past the deadline as "database unavailable", and replaces its connection', async () => {
    const before = await backendPid();
    const slow = sql`select pg_sleep(${5})`.execute(database.db);
    const error = await slow.then(
      () => undefined,
      (reason: unknown) => reason,
    );
    expect(error).toBeInstanceOf(Error);
    expect(isDatabaseUnavailableError(error)).toBe(true);
    // The next query runs on a fresh connection, not behind the abandoned pg_sleep.
    const after = await backendPid();
    expect(after).not.toBe(before);
    expect((await sql<{ n: number }>`select ${7}::int as n`.execute(database.db)).rows).toEqual([{ n: 7 }]);
  });

  it('fails every query of a transaction once one timed out, and gives the connection up', async () => {
    const before = await backendPid();
    const outcome = await database.db
      .transaction()
      .execute(async (trx) => {
        await sql`select pg_sleep(${5})`.execute(trx);
      })
      .then(
        () => 'committed',
        (reason: unknown) => reason,
      );
    expect(isDatabaseUnavailableError(outcome)).toBe(true);
    expect(await backendPid()).not.toBe(before);
  });

  it('leaves queries that answer in time alone, however many are in flight', async () => {
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => sql<{ n: number }>`select ${i}::int as n`.execute(database.db)),
    );
    expect(answers.map((answer) => answer.rows[0]!.n)).toEqual(Array.from({ length: 20 }, (_, i) => i));
  });

  it('does not apply to work run withoutQueryTimeout (migrations)', async () => {
    const { rows } = await withoutQueryTimeout(() =>
      sql<{ done: number }>`select 1 as done from pg_sleep(${(QUERY_TIMEOUT_MS * 2) / 1000})`.execute(database.db),
    );
    expect(rows).toEqual([{ done: 1 }]);
  });
});

describe('createDialectPool', () => {
  it('hands Kysely the same connection object for the same pooled client on every checkout', async () => {
    const pool = new pg.Pool({ connectionString: inject('databaseUrl'), max: 1 });
    const dialectPool = createDialectPool(pool, { queryTimeoutMs: 1_000, preparedStatements: true });
    try {
      const first = await dialectPool.connect();
      await first.query('select $1::int as n', [1]);
      first.release();
      const second = await dialectPool.connect();
      second.release();
      // Kysely keeps one connection of its own per object it gets: a new wrapper per checkout was one
      // more allocation per query on both sides.
      expect(second).toBe(first);
    } finally {
      await dialectPool.end();
    }
  });

  // A traced operation's stretch (@herald/telemetry): the checkout made in it runs its queries in it, and
  // the connection forgets it on release, so the next (untraced) checkout's queries run in none.
  it('runs the queries of a checkout made in a stretch in that stretch, and forgets it on release', async () => {
    const pool = new pg.Pool({ connectionString: inject('databaseUrl'), max: 1 });
    const dialectPool = createDialectPool(pool, { queryTimeoutMs: 1_000, preparedStatements: true });
    const operation = { name: 'a traced request' } as unknown as Parameters<typeof inStretch>[0];
    const seen: unknown[] = [];
    try {
      const traced = await inStretch(operation, () => dialectPool.connect());
      const client = (traced as unknown as { client: pg.PoolClient }).client;
      const query = client.query.bind(client);
      client.query = ((...args: never[]) => {
        seen.push(currentStretch());
        return (query as (...a: never[]) => unknown)(...args);
      }) as never;
      await traced.query('select $1::int as n', [1]);
      traced.release();
      const untraced = await dialectPool.connect();
      await untraced.query('select $1::int as n', [2]);
      untraced.release();
      expect(seen).toEqual([operation, undefined]);
    } finally {
      await dialectPool.end();
    }
  });

  it('rejects a checkout made in a stretch while PostgreSQL is unreachable, leaving no stretch behind', async () => {
    const pool = new pg.Pool({
      connectionString: 'postgres://postgres@127.0.0.1:1/none',
      connectionTimeoutMillis: 2_000,
    });
    const dialectPool = createDialectPool(pool, { queryTimeoutMs: 1_000, preparedStatements: true });
    const operation = { name: 'a traced request' } as unknown as Parameters<typeof inStretch>[0];
    try {
      await expect(inStretch(operation, () => dialectPool.connect())).rejects.toThrow(/ECONNREFUSED|connect/);
      expect(currentStretch()).toBeUndefined();
    } finally {
      await dialectPool.end();
    }
  });
});
