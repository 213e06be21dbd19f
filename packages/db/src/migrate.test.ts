import { createTestSchema } from '@herald/testing';
import { type MigrationResult, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createDatabase, type HeraldDatabase } from './create-database.js';
import { migrateToLatest, shouldStartAgain } from './migrate.js';
import { migrationProvider } from './migrations/index.js';

// Kysely's Migrator runs without the caller's plugins, so a concurrent DROP SCHEMA can't be injected
// into a real run deterministically; the decision is pinned here, the real runs in posts.test.ts.
const droppedSchema = Object.assign(new Error('schema "another" does not exist'), { code: '3F000' });
const ran: MigrationResult[] = [{ migrationName: 'm1', direction: 'Up', status: 'Success' }];

describe('shouldStartAgain', () => {
  it('starts a run again that lost a catalog race before migrating anything', () => {
    expect(shouldStartAgain(droppedSchema, [], 1)).toBe(true);
    expect(shouldStartAgain(droppedSchema, [], 2)).toBe(true);
  });

  it('also starts again when the catalog read met a table or column dropped under it', () => {
    const droppedColumn = Object.assign(new Error('column "timestamp" of relation "kysely_migration" does not exist'), {
      code: '42703',
    });
    expect(shouldStartAgain(droppedColumn, [], 1)).toBe(true);
    expect(shouldStartAgain(Object.assign(new Error('relation gone'), { code: '42P01' }), [], 1)).toBe(true);
    expect(shouldStartAgain(droppedColumn, ran, 1)).toBe(false);
  });

  it('gives up after three attempts', () => {
    expect(shouldStartAgain(droppedSchema, [], 3)).toBe(false);
  });

  it('never repeats a run that migrated something, or failed for another reason', () => {
    expect(shouldStartAgain(droppedSchema, ran, 1)).toBe(false);
    expect(shouldStartAgain(Object.assign(new Error('syntax'), { code: '42601' }), [], 1)).toBe(false);
    expect(shouldStartAgain(new Error('no code'), [], 1)).toBe(false);
    expect(shouldStartAgain(null, [], 1)).toBe(false);
  });
});

describe('migrateToLatest on a database that is up to date', () => {
  /** Kysely's PostgreSQL migration lock (PostgresAdapter's LOCK_ID): a session advisory lock. */
  const KYSELY_LOCK_ID = '3853314791062309107';
  let database: HeraldDatabase;
  let names: string[];

  beforeAll(async () => {
    database = await createDatabase({ kind: 'postgres', url: (await createTestSchema(inject('databaseUrl'))).url });
    names = Object.keys(await migrationProvider.getMigrations());
    expect((await migrateToLatest(database.db)).map((result) => result.migrationName)).toEqual(names);
  });

  afterAll(async () => {
    await database?.close();
  });

  it('returns at once without waiting for the migration lock another session holds', async () => {
    const holder = new pg.Client({ connectionString: inject('databaseUrl') });
    await holder.connect();
    try {
      await holder.query(`select pg_advisory_lock(${KYSELY_LOCK_ID})`);
      const waited = new Promise((resolve) => setTimeout(resolve, 5_000, 'waited for the lock'));
      expect(await Promise.race([migrateToLatest(database.db), waited])).toEqual([]);
    } finally {
      await holder.query(`select pg_advisory_unlock(${KYSELY_LOCK_ID})`).catch(() => {});
      await holder.end();
    }
  });

  it('still lets the Migrator refuse a database holding a migration this build does not know', async () => {
    await sql`insert into kysely_migration (name, timestamp) values ('2099-01-01T00-00_unknown', now())`.execute(
      database.db,
    );
    try {
      await expect(migrateToLatest(database.db)).rejects.toThrow(/2099-01-01T00-00_unknown/);
    } finally {
      await sql`delete from kysely_migration where name = '2099-01-01T00-00_unknown'`.execute(database.db);
    }
    expect(await migrateToLatest(database.db)).toEqual([]);
  });
});
