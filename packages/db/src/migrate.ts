import { DEFAULT_MIGRATION_TABLE, type Kysely, type MigrationResult, Migrator, sql } from 'kysely';
import { migrationProvider } from './migrations/index.js';
import { withoutQueryTimeout } from './query-timeout.js';

/** Raised when a migration fails; carries the per-migration results so the caller can log them. */
export class MigrationFailedError extends Error {
  override readonly name = 'MigrationFailedError';
  constructor(
    readonly results: MigrationResult[],
    options: { cause: unknown },
  ) {
    super(`database migration failed: ${String((options.cause as Error)?.message ?? options.cause)}`, options);
  }
}

/**
 * Brings the database to the latest schema. Safe to run from several pods at once: Kysely's
 * Migrator takes a lock table so only one applies migrations.
 * @returns what ran (empty when already up to date)
 * Runs without the per-query deadline (it may wait for another pod's migration lock).
 * @throws MigrationFailedError when a migration fails; the failing one's transaction is rolled back
 */
export function migrateToLatest(db: Kysely<any>): Promise<MigrationResult[]> {
  return withoutQueryTimeout(() => migrate(db));
}

async function migrate(db: Kysely<any>): Promise<MigrationResult[]> {
  // Keep Kysely's bookkeeping tables in the schema the connection works in (search_path). Without this,
  // Kysely looks for its table in every schema, sees another schema's copy and never creates its own.
  const { rows } = await sql<{ schema: string | null }>`select current_schema() as schema`.execute(db);
  const schema = rows[0]?.schema ?? undefined;
  if (await isUpToDate(db, schema)) return [];
  const migrator = new Migrator({ db, provider: migrationProvider, migrationTableSchema: schema });
  for (let attempt = 1; ; attempt++) {
    const { error, results = [] } = await migrator.migrateToLatest();
    if (!error) return results;
    if (!shouldStartAgain(error, results, attempt)) throw new MigrationFailedError(results, { cause: error });
  }
}

/**
 * True when the migration table lists exactly this build's migrations: the Migrator would find nothing
 * to do, after waiting for the migration lock and reading the catalog of every schema (~0.2 s of a
 * reopened embedded start; a pod's start waits behind another pod's migration). On any doubt
 * (no table yet, a migration missing or unknown) the Migrator runs and decides, as before.
 */
async function isUpToDate(db: Kysely<any>, schema: string | undefined): Promise<boolean> {
  const expected = Object.keys(await migrationProvider.getMigrations()).sort();
  const table = sql.table(schema ? `${schema}.${DEFAULT_MIGRATION_TABLE}` : DEFAULT_MIGRATION_TABLE);
  try {
    const { rows } = await sql<{ name: string }>`select name from ${table}`.execute(db);
    const applied = rows.map((row) => row.name).sort();
    return applied.length === expected.length && applied.every((name, index) => name === expected[index]);
  } catch {
    return false;
  }
}

/**
 * What Kysely's catalog read fails with when another session drops a schema meanwhile: invalid_schema_name,
 * or undefined_column / undefined_table from `pg_get_serial_sequence`, which the introspector calls for
 * every column of every schema (seen: `column "timestamp" of relation "kysely_migration" does not exist`,
 * another test run's table dropped under the read).
 */
const CATALOG_RACE_CODES = new Set(['3F000', '42703', '42P01']);
/** How often a migration run is started again after losing a race with a concurrent schema drop. */
const CATALOG_RACE_ATTEMPTS = 3;

/**
 * Whether a failed migration run may simply be started again: Kysely's introspection reads the catalog of
 * every schema, and a schema another session drops at that moment fails the read (CATALOG_RACE_CODES) before
 * anything was migrated. That read is safe to repeat, a bounded number of times; nothing else is.
 */
export function shouldStartAgain(error: unknown, results: readonly MigrationResult[], attempt: number): boolean {
  const code = (error as { code?: string } | null)?.code;
  return code !== undefined && CATALOG_RACE_CODES.has(code) && results.length === 0 && attempt < CATALOG_RACE_ATTEMPTS;
}
