/**
 * Operators' keyring CLI (docs/operations.md, "Webhook encryption keys"): `pnpm secrets rotate-key
 * [--batch-size N]` re-encrypts every webhook signing secret not sealed under the first key of
 * `HERALD_ENCRYPTION_KEYS`, in batches, while the API and the dispatchers keep running (each row is
 * rewritten only if unchanged since it was read). Prints progress; exit status 0 once every row is
 * under the first key, 1 on an error or rows left over, 2 on bad usage. Reads DATABASE_URL and
 * HERALD_ENCRYPTION_KEYS (the new key first, the old ones after it); without DATABASE_URL it opens the
 * embedded database in HERALD_DATA_DIR, which only one process may have open (stop the API first).
 */
import { encryptionKeys, InvalidConfigError, parseEnv } from '@herald/config';
import {
  countNotUnderFirstKey,
  createDatabase,
  DataDirectoryInUseError,
  migrateToLatest,
  resealWebhookSecrets,
  SECRET_BATCH_SIZE,
} from '@herald/db';
import { z } from 'zod';

const USAGE = 'usage: secrets rotate-key [--batch-size N]';
const MAX_BATCH_SIZE = 10_000;

const EnvSchema = z.object({
  DATABASE_URL: z.url({ protocol: /^postgres(ql)?$/, error: 'expected a postgres:// URL' }).optional(),
  HERALD_DATA_DIR: z.string().min(1).default('./.herald'),
  HERALD_ENCRYPTION_KEYS: encryptionKeys(),
});

const [command, ...args] = process.argv.slice(2);
const batchFlag = args.indexOf('--batch-size');
const batchSize = batchFlag < 0 ? SECRET_BATCH_SIZE : Number(args[batchFlag + 1]);
if (
  command !== 'rotate-key' ||
  !Number.isInteger(batchSize) ||
  batchSize < 1 ||
  batchSize > MAX_BATCH_SIZE ||
  args.length !== (batchFlag < 0 ? 0 : 2)
) {
  process.stderr.write(`${USAGE}\n`);
  process.exit(2);
}

let env: z.output<typeof EnvSchema>;
try {
  env = parseEnv(EnvSchema, process.env);
} catch (error) {
  if (error instanceof InvalidConfigError) {
    for (const line of error.lines) process.stderr.write(`secrets: invalid configuration: ${line}\n`);
    process.exit(1);
  }
  throw error;
}

const keyring = env.HERALD_ENCRYPTION_KEYS;
const database = await createDatabase(
  env.DATABASE_URL
    ? { kind: 'postgres', url: env.DATABASE_URL, poolMax: 2 }
    : { kind: 'embedded', dataDir: `${env.HERALD_DATA_DIR}/pgdata` },
).catch((error: unknown) => {
  // A server (or another CLI) has the embedded data directory open: one line, nothing touched.
  if (!(error instanceof DataDirectoryInUseError)) throw error;
  process.stderr.write(`secrets: ${error.message}\n`);
  process.exit(1);
});
let exitCode = 0;
try {
  // The table must have its sealed column, even when this runs before any process of this version.
  await migrateToLatest(database.db);
  const before = await countNotUnderFirstKey(database.db, keyring);
  process.stdout.write(`${before} signing secret(s) not under key "${keyring[0].id}"\n`);
  const { resealed, remaining } = await resealWebhookSecrets(database.db, keyring, {
    batchSize,
    onBatch: (done) => process.stdout.write(`re-encrypted ${done}\n`),
  });
  process.stdout.write(`${resealed} re-encrypted under key "${keyring[0].id}", ${remaining} left\n`);
  if (remaining > 0) {
    process.stderr.write('secrets: rows were changed meanwhile and are left over; run the command again\n');
    exitCode = 1;
  }
} catch (error) {
  process.stderr.write(`secrets: ${error instanceof Error ? error.message : String(error)}\n`);
  exitCode = 1;
} finally {
  await database.close();
}
await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
process.exit(exitCode);
