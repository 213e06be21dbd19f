/**
 * Operators' dead-letter CLI (SPEC §7): `pnpm --filter webhook-dispatcher dlq list`,
 * `… dlq replay <delivery-or-entry-id>…` and `… dlq replay --all`. Reads DATABASE_URL, REDIS_URL and
 * HERALD_REDIS_PREFIX like the dispatcher. Exit status 0 on success, 1 on an error, 2 on bad usage.
 */
import { InvalidConfigError } from '@herald/config';
import { WEBHOOK_DELIVERY_ID_PREFIX, webhookRedisKeys } from '@herald/contracts';
import { createDatabase } from '@herald/db';
import { createRedisStreamQueue, listDeadLetters, replayDeadLetters } from '@herald/webhook-engine';
import { pino } from 'pino';
import { loadDispatcherConfig } from './env.js';

const USAGE = 'usage: dlq list [--json] | dlq replay <delivery-id|entry-id>… | dlq replay --all';

const [command, ...args] = process.argv.slice(2);
if (command !== 'list' && command !== 'replay') {
  process.stderr.write(`${USAGE}\n`);
  process.exit(2);
}
if (command === 'replay' && args.length === 0) {
  process.stderr.write(`${USAGE}\n`);
  process.exit(2);
}

let config: ReturnType<typeof loadDispatcherConfig>;
try {
  config = loadDispatcherConfig();
} catch (error) {
  if (error instanceof InvalidConfigError) {
    for (const line of error.lines) process.stderr.write(`dlq: invalid configuration: ${line}\n`);
    process.exit(1);
  }
  throw error;
}

const database = await createDatabase({ kind: 'postgres', url: config.databaseUrl, poolMax: 2 });
const queue = createRedisStreamQueue({
  redisUrl: config.redisUrl,
  keys: webhookRedisKeys(config.redisPrefix),
  logger: pino({ level: 'silent' }),
});
const deps = { db: database.db, queue };
let exitCode = 0;
try {
  if (command === 'list') {
    const letters = await listDeadLetters(deps);
    if (args.includes('--json')) {
      process.stdout.write(`${JSON.stringify(letters, null, 2)}\n`);
    } else if (letters.length === 0) {
      process.stdout.write('no dead letters\n');
    } else {
      for (const { id, status, letter } of letters) {
        process.stdout.write(
          `${id}  ${letter.deliveryId}  ${status}  ${letter.eventType} ${letter.eventId}  org=${letter.orgId}  ` +
            `${letter.url}  attempts=${letter.attempts}  last=${letter.lastStatusCode ?? '-'} ${letter.lastError ?? ''}  dead=${letter.deadAt}\n`,
        );
      }
      process.stdout.write(
        `${letters.length} dead letter(s); replay with: dlq replay <delivery-id> | dlq replay --all\n`,
      );
    }
  } else {
    const all = args.includes('--all');
    const result = await replayDeadLetters(deps, all ? undefined : args);
    for (const id of result.replayed) process.stdout.write(`replayed ${id}\n`);
    for (const id of result.stale) process.stdout.write(`removed ${id} (no longer DEAD)\n`);
    if (!all) {
      const found = new Set([...result.replayed, ...result.stale]);
      const missing = args.filter((id) => !found.has(id) && id.startsWith(WEBHOOK_DELIVERY_ID_PREFIX));
      for (const id of missing) process.stderr.write(`not found: ${id}\n`);
    }
    process.stdout.write(`${result.replayed.length} replayed, ${result.stale.length} stale entries removed\n`);
  }
} catch (error) {
  process.stderr.write(`dlq: ${error instanceof Error ? error.message : String(error)}\n`);
  exitCode = 1;
} finally {
  await queue.close();
  await database.close();
}
process.exit(exitCode);
