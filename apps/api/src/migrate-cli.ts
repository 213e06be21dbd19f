import { InvalidConfigError } from '@herald/config';
import { createDatabase, DataDirectoryInUseError, migrateToLatest } from '@herald/db';
import { loadApiConfig } from './env.js';

// `pnpm migrate`: brings the configured database (DATABASE_URL, or the embedded one) to the latest schema.
// An embedded data directory is locked while migrating: refused (exit 1, one line) while a server has it.
try {
  const config = loadApiConfig();
  const database = await createDatabase(config.database);
  try {
    const results = await migrateToLatest(database.db);
    if (results.length === 0) process.stdout.write('database is up to date\n');
    for (const result of results) process.stdout.write(`${result.status}: ${result.migrationName}\n`);
  } finally {
    await database.close();
  }
} catch (error) {
  if (error instanceof InvalidConfigError) {
    for (const line of error.lines) process.stderr.write(`herald: invalid configuration: ${line}\n`);
  } else if (error instanceof DataDirectoryInUseError) {
    process.stderr.write(`herald: ${error.message}\n`);
  } else {
    process.stderr.write(`herald: migration failed: ${(error as Error).message}\n`);
  }
  process.exit(1);
}
