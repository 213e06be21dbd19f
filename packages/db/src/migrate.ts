import { type Kysely, type MigrationResult, Migrator } from 'kysely';
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
  const migrator = new Migrator({ db, provider: migrationProvider });
  const { error, results = [] } = await migrator.migrateToLatest();
  if (error) throw new MigrationFailedError(results, { cause: error });
  return results;
}
