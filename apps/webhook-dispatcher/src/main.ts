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
import { TracingConfigError } from '@herald/telemetry';
import { startTracing } from '@herald/telemetry/start';
import { startDispatcherApp } from './app.js';
import { loadDispatcherConfig } from './env.js';
import { createLogger } from './logger.js';

/** How long the stop waits for the last spans to be exported. */
const TRACING_SHUTDOWN_MS = 2_000;

// With source maps on (the container image's `--enable-source-maps`), the bundle's map is parsed now, not at
// the first error's stack: its ~6 MB is in the footprint from the start, not a step in the middle of an outage.
parseSourceMapNow(import.meta.url);

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
// Each part that fails to start has logged what failed, and what had started is closed.
const app = await startDispatcherApp(config, logger, {
  onStep: (step) => {
    if (step === config.testCrashAt) process.kill(process.pid, 'SIGKILL');
  },
}).catch(() => exitWithLines([]));
registerLogDropMetric(app.registry, [logs, errors]);
tracing.registerMetrics(app.registry);
for (const { path, reason } of tracing.fallbacks) logger.warn({ path, reason }, 'fast path off: tracing runs, slower');
// Everything, attempts in flight included, gets SHUTDOWN_GRACE_MS; past it the process exits with 1.
// Installed before the ready line: whoever reads that line may signal at once, and a signal that comes
// before a handler is installed ends the process on the spot.
handleShutdownSignals({
  stop: async () => {
    await app.stop();
    await tracing.shutdown(TRACING_SHUTDOWN_MS);
  },
  hardExitMs: config.http.shutdownGraceMs,
  beforeExit: (timeoutMs) => Promise.all([logs.flush(timeoutMs), errors.flush(timeoutMs)]).then(() => {}),
  onEvent: shutdownEventLogger(logger),
});

const { address } = app;
logger.info(
  { address: address.address, port: address.port, redisPrefix: config.redisPrefix, tracing: tracing.enabled },
  'herald webhook dispatcher ready',
);
