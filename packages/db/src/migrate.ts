import { type Kysely, type MigrationResult, Migrator, sql } from 'kysely';
import { migrationProvider } from './migrations/index.js';

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
 * @throws MigrationFailedError when a migration fails; the failing one's transaction is rolled back
 */
export async function migrateToLatest(db: Kysely<any>): Promise<MigrationResult[]> {
  // Keep Kysely's bookkeeping tables in the schema the connection works in (search_path). Without this,
  // Kysely looks for its table in every schema, sees another schema's copy and never creates its own.
  const { rows } = await sql<{ schema: string }>`select current_schema() as schema`.execute(db);
  const migrator = new Migrator({ db, provider: migrationProvider, migrationTableSchema: rows[0]?.schema });
  const { error, results = [] } = await migrator.migrateToLatest();
  if (error) throw new MigrationFailedError(results, { cause: error });
  return results;
}
