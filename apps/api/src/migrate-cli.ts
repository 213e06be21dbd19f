import { InvalidConfigError, stderrLogOutput, stdoutLogOutput } from '@herald/config';
import {
  createDatabase,
  DataDirectoryInUseError,
  migrateToLatest,
  prepareWebhookSecrets,
  SecretUnreadableError,
} from '@herald/db';
import { loadOrCreateDevEncryptionKeys } from './dev-credentials.js';
import { loadApiConfig } from './env.js';

// `pnpm migrate`: brings the configured database (DATABASE_URL, or the embedded one) to the latest schema,
// then checks that the keyring opens what is stored and seals under it every webhook signing secret still
// stored in plain text (a database of a version before encryption at rest), as the API's start does
// (docs/operations.md, "Webhook encryption keys", says when to run it during an upgrade).
// An embedded data directory is locked while migrating: refused (exit 1, one line) while a server has it.
// Output never throws or blocks when its reader is gone or stalled (log-output.ts).
const out = stdoutLogOutput();
const err = stderrLogOutput();
let code = 0;
try {
  const config = loadApiConfig();
  const database = await createDatabase(config.database);
  try {
    const results = await migrateToLatest(database.db);
    if (results.length === 0) out.write('database is up to date\n');
    for (const result of results) out.write(`${result.status}: ${result.migrationName}\n`);
    const keyring = config.webhooks.encryptionKeys ?? loadOrCreateDevEncryptionKeys(config.dataDir);
    const { sealed } = await prepareWebhookSecrets(database.db, keyring);
    out.write(
      sealed > 0
        ? `sealed ${sealed} webhook signing secret${sealed === 1 ? '' : 's'} stored in plain text under key "${keyring[0].id}"\n`
        : 'webhook signing secrets: none in plain text\n',
    );
  } finally {
    await database.close();
  }
} catch (error) {
  if (error instanceof InvalidConfigError) {
    for (const line of error.lines) err.write(`herald: invalid configuration: ${line}\n`);
  } else if (error instanceof DataDirectoryInUseError || error instanceof SecretUnreadableError) {
    err.write(`herald: ${error.message}\n`);
  } else {
    err.write(`herald: migration failed: ${(error as Error).message}\n`);
  }
  code = 1;
}
await Promise.all([out.flush(1_000), err.flush(1_000)]);
process.exit(code);
