import { createTestSchema, type TestSchema } from '@herald/testing';
import { type Kysely, type MigrationResult, Migrator, sql } from 'kysely';
import { createDatabase, type HeraldDatabase } from './create-database.js';
import type { Database } from './database.js';
import { migrateToLatest } from './migrate.js';
import { migrationProvider } from './migrations/index.js';
import { orgOrderLockKey } from './webhook-outbox.js';

/*
 * The two backends Herald's data access runs on, for tests that pin the same behaviour on both:
 * PostgreSQL (a fresh schema) and embedded mode's PGlite (in memory). `open` leaves the database
 * empty (for a test that pins what a migration does); `openMigrated` migrates it first.
 */

export interface TestBackend {
  name: 'PostgreSQL' | 'embedded PGlite';
  /** A new database on this backend, and on PostgreSQL the schema it lives in. */
  open(): Promise<{ database: HeraldDatabase; schema?: TestSchema }>;
  /**
   * A new database ({@link open}) migrated to the latest schema, as a start migrates it
   * (`migrateToLatest`); or, given `to`, only up to and including that migration (see
   * {@link migrateTestDatabaseTo}), for a test that writes rows as an older version held them.
   */
  openMigrated(to?: string): Promise<MigratedTestDatabase>;
}

export interface MigratedTestDatabase {
  database: HeraldDatabase;
  /** `database.db`. */
  db: Kysely<Database>;
  schema?: TestSchema;
  /** What migrating ran, one result a migration. */
  migrations: MigrationResult[];
}

/** Both backends; `databaseUrl` is read when PostgreSQL's is opened (e.g. `() => inject('databaseUrl')`). */
export function testBackends(databaseUrl: () => string): TestBackend[] {
  return [
    withOpenMigrated({
      name: 'PostgreSQL',
      open: async () => {
        const schema = await createTestSchema(databaseUrl());
        return { database: await createDatabase({ kind: 'postgres', url: schema.url }), schema };
      },
    }),
    withOpenMigrated({
      name: 'embedded PGlite',
      open: async () => ({ database: await createDatabase({ kind: 'embedded', dataDir: 'memory://' }) }),
    }),
  ];
}

function withOpenMigrated(backend: Omit<TestBackend, 'openMigrated'>): TestBackend {
  return {
    ...backend,
    async openMigrated(to) {
      const { database, schema } = await backend.open();
      const migrations = to ? await migrateTestDatabaseTo(database.db, to) : await migrateToLatest(database.db);
      return { database, db: database.db, schema, migrations };
    },
  };
}

/**
 * Migrates `db` up (or down) to the migration named `to`, keeping Kysely's migration table in the
 * connection's own schema as {@link migrateToLatest} does; throws the error a migration failed with.
 */
export async function migrateTestDatabaseTo(db: Kysely<Database>, to: string): Promise<MigrationResult[]> {
  const { rows } = await sql<{ schema: string }>`select current_schema() as schema`.execute(db);
  const migrator = new Migrator({ db, provider: migrationProvider, migrationTableSchema: rows[0]?.schema });
  const { error, results = [] } = await migrator.migrateTo(to);
  if (error) throw error;
  return results;
}

/**
 * Transactions of this database waiting for `orgId`'s ordering lock in the connection's schema (see
 * `orgOrderLock` in webhook-outbox.ts), from `pg_locks`. PostgreSQL only.
 */
export async function orgOrderLockWaiters(db: Kysely<Database>, orgId: string): Promise<number> {
  const { rows } = await sql<{ n: string }>`select count(*) as n
    from pg_locks, (select ${orgId}::text as org_id) org
    where locktype = 'advisory' and not granted and objsubid = 1
      and ((classid::bigint << 32) | objid::bigint) = ${sql.raw(orgOrderLockKey('org.org_id'))}`.execute(db);
  return Number(rows[0]!.n);
}

/** Polls {@link orgOrderLockWaiters} until a transaction waits for `orgId`'s lock, or `timeoutMs` passes; returns the last count. */
export async function untilOrgOrderLockWaiter(
  db: Kysely<Database>,
  orgId: string,
  timeoutMs = 10_000,
): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const waiting = await orgOrderLockWaiters(db, orgId);
    if (waiting > 0 || Date.now() > deadline) return waiting;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
