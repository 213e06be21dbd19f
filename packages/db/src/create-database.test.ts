import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createOwnDatabase, type OwnDatabase } from '@herald/testing';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createDatabase, type HeraldDatabase } from './create-database.js';
import { isDatabaseUnavailableError } from './database-unavailable.js';

// A failover or `pg_terminate_backend` drops every connection of the pool. node-postgres reports it as an
// 'error' event on the pool (idle connections) or on the client (checked-out ones); unheard, either
// throws and ends the process, which vitest reports as an uncaught exception failing this file.

let own: OwnDatabase;
let database: HeraldDatabase;
const heard: Error[] = [];

beforeAll(async () => {
  own = await createOwnDatabase(inject('databaseUrl'));
  database = await createDatabase(
    { kind: 'postgres', url: own.url, poolMax: 4 },
    { onConnectionError: (error) => heard.push(error) },
  );
});

afterAll(async () => {
  await database?.close();
  await own?.drop();
});

/** `select 1`, retried for up to 10 s while (and only while) it fails with an "unavailable" error. */
async function selectOneRecovering(): Promise<Array<{ one: number }>> {
  for (const deadline = Date.now() + 10_000; ; ) {
    try {
      return (await sql<{ one: number }>`select 1 as one`.execute(database.db)).rows;
    } catch (error) {
      expect(isDatabaseUnavailableError(error)).toBe(true);
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

async function fillPool(): Promise<void> {
  // Four concurrent queries leave four idle pooled connections behind.
  await Promise.all([1, 2, 3, 4].map(() => sql`select pg_sleep(0.05)`.execute(database.db)));
}

describe('createDatabase when PostgreSQL drops its connections', () => {
  it('survives the termination of idle pooled connections and answers the next query', async () => {
    await fillPool();
    expect(await own.terminateBackends()).toBeGreaterThan(0);
    await expect.poll(() => heard.length, { timeout: 10_000 }).toBeGreaterThan(0);
    expect(heard.every(isDatabaseUnavailableError)).toBe(true);
    // A query may still pick a terminated connection whose notice has not arrived yet: it fails as
    // "unavailable" (a clear 503 upstream) and the pool replaces that connection; within a bound, queries work.
    expect(await selectOneRecovering()).toEqual([{ one: 1 }]);
    await expect(database.ping()).resolves.toBeUndefined();
  });

  it('fails a transaction whose connection is terminated with an "unavailable" error, then recovers', async () => {
    const before = heard.length;
    const failed = database.db
      .transaction()
      .execute(async (trx) => {
        await sql`select 1`.execute(trx);
        await sql`select pg_sleep(5)`.execute(trx);
      })
      .then(
        () => undefined,
        (caught: unknown) => caught,
      );
    await expect.poll(() => own.backendCount(), { timeout: 10_000 }).toBeGreaterThan(0);
    await own.terminateBackends();
    const error = await failed;
    expect(isDatabaseUnavailableError(error)).toBe(true);
    await expect.poll(() => heard.length, { timeout: 10_000 }).toBeGreaterThan(before);
    expect(await selectOneRecovering()).toEqual([{ one: 1 }]);
  });
});

describe('createDatabase when PostgreSQL is not there', () => {
  it('rejects queries and ping with an "unavailable" error instead of hanging', async () => {
    // A port nobody listens on: connection refused, as while a cluster restarts.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const { port } = probe.address() as { port: number };
    await new Promise((resolve) => probe.close(resolve));
    const gone = await createDatabase({ kind: 'postgres', url: `postgres://postgres@127.0.0.1:${port}/none` });
    try {
      const error = await sql`select 1`.execute(gone.db).then(
        () => undefined,
        (caught: unknown) => caught,
      );
      expect(isDatabaseUnavailableError(error)).toBe(true);
      await expect(gone.ping()).rejects.toSatisfy(isDatabaseUnavailableError);
    } finally {
      await gone.close();
    }
  });
});

describe('createDatabase when PostgreSQL hangs', () => {
  it("gives up a ping within a second, under Kubernetes' 2 s probe timeout, on a server that never answers", async () => {
    // Accepts connections and says nothing, as a frozen server (SIGSTOP) whose socket is still open.
    const silent = new Set<import('node:net').Socket>();
    const frozen = createServer((socket) => silent.add(socket));
    await new Promise<void>((resolve) => frozen.listen(0, '127.0.0.1', resolve));
    const { port } = frozen.address() as { port: number };
    const hung = await createDatabase({ kind: 'postgres', url: `postgres://postgres@127.0.0.1:${port}/none` });
    try {
      const started = performance.now();
      const error = await hung.ping().then(
        () => undefined,
        (caught: unknown) => caught,
      );
      expect(error).toMatchObject({
        name: 'DatabasePingTimeoutError',
        message: 'database did not answer within 1000 ms',
      });
      // Its own deadline ended it (not a refused or dropped connection); the bound is loose for a busy machine.
      expect(performance.now() - started).toBeGreaterThanOrEqual(900);
    } finally {
      for (const socket of silent) socket.destroy();
      await hung.close().catch(() => {});
      await new Promise((resolve) => frozen.close(resolve));
    }
  });
});

describe('isDatabaseUnavailableError', () => {
  it('tells a vanished server from a wrong statement', () => {
    const terminated = Object.assign(new Error('terminating connection due to administrator command'), {
      code: '57P01',
    });
    expect(isDatabaseUnavailableError(terminated)).toBe(true);
    expect(isDatabaseUnavailableError(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isDatabaseUnavailableError(new Error('timeout exceeded when trying to connect'))).toBe(true);
    expect(isDatabaseUnavailableError(new Error('wrapped', { cause: terminated }))).toBe(true);
    expect(isDatabaseUnavailableError(Object.assign(new Error('syntax'), { code: '42601' }))).toBe(false);
    expect(isDatabaseUnavailableError(Object.assign(new Error('unique'), { code: '23505' }))).toBe(false);
    expect(isDatabaseUnavailableError('not an error')).toBe(false);
  });
});

describe('createDatabase in embedded mode (PGlite)', () => {
  it('answers queries after close with an "unavailable" error instead of crashing or hanging', async () => {
    const embedded = await createDatabase({ kind: 'embedded', dataDir: 'memory://' });
    await expect(embedded.ping()).resolves.toBeUndefined();
    await embedded.close();
    const error = await sql`select 1`.execute(embedded.db).then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(isDatabaseUnavailableError(error)).toBe(true);
    await expect(embedded.ping()).rejects.toSatisfy(isDatabaseUnavailableError);
  });
});

describe('embedded PGlite footprint', () => {
  it('runs with 16MB of shared buffers instead of the 128MB default', async () => {
    const database = await createDatabase({ kind: 'embedded', dataDir: 'memory://' });
    try {
      const { rows } = await sql<{ shared_buffers: string }>`show shared_buffers`.execute(database.db);
      expect(rows[0]?.shared_buffers).toBe('16MB');
    } finally {
      await database.close();
    }
  });

  it('creates a fresh data directory (in a child process, or in process where its script is missing) and opens it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'herald-pglite-'));
    const dataDir = join(dir, 'pgdata');
    try {
      const database = await createDatabase({ kind: 'embedded', dataDir });
      await database.ping();
      await database.close();
      expect(existsSync(join(dataDir, 'PG_VERSION'))).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
