import type { AddressInfo } from 'node:net';
import { InvalidConfigError } from '@herald/config';
import { webhookRedisKeys } from '@herald/contracts';
import { createDatabase, migrateToLatest } from '@herald/db';
import { createDispatcher, createOutboxWakeListener, createRedisStreamQueue } from '@herald/webhook-engine';
import { loadDispatcherConfig } from './env.js';
import { createLogger } from './logger.js';
import { createOpsServer } from './ops-server.js';

let config: ReturnType<typeof loadDispatcherConfig>;
try {
  config = loadDispatcherConfig();
} catch (error) {
  if (error instanceof InvalidConfigError) {
    for (const line of error.lines) process.stderr.write(`herald-webhook-dispatcher: invalid configuration: ${line}\n`);
    process.exit(1);
  }
  throw error;
}

const logger = createLogger(config.logLevel);
// Prepared: the engine's few statements are large CTEs whose planning costs more than running them.
const database = await createDatabase({
  kind: 'postgres',
  url: config.databaseUrl,
  poolMax: config.databasePoolMax,
  preparedStatements: config.databasePreparedStatements,
});
try {
  // Safe beside API pods doing the same: Kysely's migrator takes a lock. The dispatcher may start first.
  await migrateToLatest(database.db);
} catch (error) {
  logger.fatal({ err: error }, 'database migration failed');
  process.exit(1);
}
const keys = webhookRedisKeys(config.redisPrefix);
const queue = createRedisStreamQueue({ redisUrl: config.redisUrl, keys, logger });
const dispatcher = createDispatcher({
  db: database.db,
  databaseUrl: config.databaseUrl,
  queue,
  logger,
  settings: config.webhooks,
  keyring: config.encryptionKeys,
  onStep: (step) => {
    if (step === config.testCrashAt) process.kill(process.pid, 'SIGKILL');
  },
});
await dispatcher.start().catch((error: unknown) => {
  logger.fatal({ err: error }, 'webhook dispatcher could not start');
  process.exit(1);
});
// API pods announce their publishPost commits on Redis (no NOTIFY there, see outbox-wake.ts).
const wake = createOutboxWakeListener({
  redisUrl: config.redisUrl,
  channel: keys.outboxWakeChannel,
  logger,
  onWake: () => dispatcher.notifyOutbox(),
});
await wake.start().catch((error: unknown) => {
  logger.fatal({ err: error }, 'could not subscribe to the outbox wake-up channel');
  process.exit(1);
});

const ops = createOpsServer({ registry: dispatcher.metrics.registry, readiness: () => dispatcher.readiness() });
await new Promise<void>((resolve, reject) => {
  ops.once('error', reject);
  ops.listen(config.http.port, config.http.host, () => resolve());
}).catch((error: unknown) => {
  logger.fatal({ err: error }, `cannot listen on ${config.http.host}:${config.http.port}`);
  process.exit(1);
});
const address = ops.address() as AddressInfo;
logger.info(
  { address: address.address, port: address.port, redisPrefix: config.redisPrefix },
  'herald webhook dispatcher ready',
);

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    logger.info({ signal }, 'shutting down');
    const hardExit = setTimeout(() => {
      logger.error('shutdown grace period exceeded; exiting');
      process.exit(1);
    }, config.http.shutdownGraceMs);
    hardExit.unref();
    (async () => {
      ops.close();
      await wake.stop();
      await dispatcher.stop();
      await queue.close();
      await database.close();
    })().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  });
}
