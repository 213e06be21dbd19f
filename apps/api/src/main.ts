import {
  exitWithLines,
  handleShutdownSignals,
  InvalidConfigError,
  parseSourceMapNow,
  shutdownEventLogger,
  stderrLogOutput,
  stdoutLogOutput,
} from '@herald/config';
import { registerLogDropMetric } from '@herald/config/log-output-metric';
import { DataDirectoryInUseError } from '@herald/db';
import { TracingConfigError } from '@herald/telemetry';
import { startTracing } from '@herald/telemetry/start';
import { createApp } from './app.js';
import { DEMO_USER } from './dev-credentials.js';
import { loadApiConfig } from './env.js';
import { createLogger } from './logger.js';
import { CONSOLE_PATH } from './plugins/use-console.js';
import { GRAPHQL_PATH } from './server.js';

/** How long the stop waits for the last spans to be exported. */
const TRACING_SHUTDOWN_MS = 2_000;

// With source maps on (the container image's `--enable-source-maps`), the bundle's map is parsed now, not at
// the first error's stack: its ~6 MB is in the footprint from the start, not a step in the middle of an outage.
parseSourceMapNow(import.meta.url);

// Logs (stdout) and the banner (stderr) never block or throw, whatever their readers do: see log-output.ts.
const logs = stdoutLogOutput();
const banner = stderrLogOutput();

const config = await Promise.resolve()
  .then(() => loadApiConfig())
  .catch((error: unknown) => {
    if (!(error instanceof InvalidConfigError)) throw error;
    return exitWithLines(error.lines.map((line) => `herald: invalid configuration: ${line}`));
  });

// Tracing first (OTEL_* variables; off without an endpoint): the logger's trace fields and the database
// and Redis instrumentations must be in place before the first line and the first connection.
const tracing = await startTracing({ serviceName: 'herald-api' }).catch((error: unknown) => {
  if (!(error instanceof TracingConfigError)) throw error;
  return exitWithLines(error.lines.map((line) => `herald: invalid configuration: ${line}`));
});
const logger = createLogger(config.logLevel, logs);
logger.info(
  {
    mode: config.mode,
    database: config.database.kind,
    pubsub: config.redisUrl ? 'redis' : 'memory',
    tracing: tracing.enabled,
  },
  `herald api starting in ${config.mode} mode`,
);
const app = await createApp(config, logger).catch((error: unknown) => {
  if (error instanceof DataDirectoryInUseError) {
    // Another server (or CLI) has this data directory open: one line, as for a bad variable.
    return exitWithLines([`herald: ${error.message}`]);
  }
  logger.fatal({ err: error }, 'start-up failed');
  return exitWithLines([]);
});
registerLogDropMetric(app.metrics.registry, [logs, banner]);
tracing.registerMetrics(app.metrics.registry);
for (const { path, reason } of tracing.fallbacks) {
  app.metrics.fastPathFallback.labels(path).set(1);
  logger.warn({ path, reason }, 'fast path off: tracing runs, slower');
}
const address = await app.listen().catch((error: unknown) => {
  logger.fatal({ err: error }, `cannot listen on ${config.http.host}:${config.http.port}`);
  return exitWithLines([]);
});
// The hard bound: the drain pause and the grace period, plus the time to close Redis and the database.
// Installed before the "listening" line: whoever reads it may signal at once, and a signal that comes
// before a handler is installed ends the process on the spot.
handleShutdownSignals({
  // The last spans are exported after the app stopped, within the bound's 5 s margin.
  stop: () => app.stop().finally(() => tracing.shutdown(TRACING_SHUTDOWN_MS)),
  hardExitMs: config.http.drainDelayMs + config.http.shutdownGraceMs + 5_000,
  beforeExit: (timeoutMs) => Promise.all([logs.flush(timeoutMs), banner.flush(timeoutMs)]).then(() => {}),
  onEvent: shutdownEventLogger(logger),
});

logger.info(
  { mode: config.mode, database: config.database.kind, address: address.address, port: address.port },
  'herald api listening',
);

if (app.devToken) {
  const host = config.http.host === '0.0.0.0' || config.http.host === '::' ? 'localhost' : config.http.host;
  const token = app.devToken;
  banner.write(
    [
      '',
      `  Herald is running in ${config.mode} mode (data in ${config.dataDir}).`,
      `  GraphiQL:  http://${host}:${address.port}${GRAPHQL_PATH}`,
      `  Console:   http://${host}:${address.port}${CONSOLE_PATH}/`,
      `  Development token for ${DEMO_USER.name} (org "${DEMO_USER.orgs[0]}"), valid 30 days. In GraphiQL's Headers tab:`,
      `  {"Authorization": "Bearer ${token}"}`,
      '',
      '',
    ].join('\n'),
  );
}
