import type { AddressInfo } from 'node:net';
import {
  exitWithLines,
  handleShutdownSignals,
  InvalidConfigError,
  shutdownEventLogger,
  stderrLogOutput,
  stdoutLogOutput,
} from '@herald/config';
import { registerLogDropMetric } from '@herald/config/log-output-metric';
import { webhookRedisKeys } from '@herald/contracts';
import { createDatabase, migrateToLatest } from '@herald/db';
import { TracingConfigError } from '@herald/telemetry';
import { startTracing } from '@herald/telemetry/start';
import { createDispatcher, createOutboxWakeListener, createRedisStreamQueue } from '@herald/webhook-engine';
import { loadDispatcherConfig } from './env.js';
import { createLogger } from './logger.js';
import { createOpsServer } from './ops-server.js';

/** How long the stop waits for the last spans to be exported. */
const TRACING_SHUTDOWN_MS = 2_000;

// Logs never block or throw, whatever their reader does (see log-output.ts in @herald/config).
const logs = stdoutLogOutput();
const errors = stderrLogOutput();

const config = await Promise.resolve()
  .then(() => loadDispatcherConfig())
  .catch((error: unknown) => {
    if (!(error instanceof InvalidConfigError)) throw error;
    return exitWithLines(error.lines.map((line) => `herald-webhook-dispatcher: invalid configuration: ${line}`));
  });

// Tracing first (OTEL_* variables; off without an endpoint): the logger's trace fields and the database
// and Redis instrumentations must be in place before the first line and the first connection.
const tracing = await startTracing({ serviceName: 'herald-webhook-dispatcher' }).catch((error: unknown) => {
  if (!(error instanceof TracingConfigError)) throw error;
  return exitWithLines(error.lines.map((line) => `herald-webhook-dispatcher: invalid configuration: ${line}`));
});
const logger = createLogger(config.logLevel, logs);
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
  await exitWithLines([]);
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
  return exitWithLines([]);
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
  return exitWithLines([]);
});

registerLogDropMetric(dispatcher.metrics.registry, [logs, errors]);
tracing.registerMetrics(dispatcher.metrics.registry);
const ops = createOpsServer({ registry: dispatcher.metrics.registry, readiness: () => dispatcher.readiness() });
await new Promise<void>((resolve, reject) => {
  ops.once('error', reject);
  ops.listen(config.http.port, config.http.host, () => resolve());
}).catch((error: unknown) => {
  logger.fatal({ err: error }, `cannot listen on ${config.http.host}:${config.http.port}`);
  return exitWithLines([]);
});
// Everything, attempts in flight included, gets SHUTDOWN_GRACE_MS; past it the process exits with 1.
// Installed before the ready line: whoever reads that line may signal at once, and a signal that comes
// before a handler is installed ends the process on the spot.
handleShutdownSignals({
  stop: async () => {
    ops.close();
    await wake.stop();
    await dispatcher.stop();
    await queue.close();
    await database.close();
    await tracing.shutdown(TRACING_SHUTDOWN_MS);
  },
  hardExitMs: config.http.shutdownGraceMs,
  beforeExit: (timeoutMs) => Promise.all([logs.flush(timeoutMs), errors.flush(timeoutMs)]).then(() => {}),
  onEvent: shutdownEventLogger(logger),
});

const address = ops.address() as AddressInfo;
logger.info(
  { address: address.address, port: address.port, redisPrefix: config.redisPrefix, tracing: tracing.enabled },
  'herald webhook dispatcher ready',
);
