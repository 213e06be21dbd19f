import {
  exitWithLines,
  handleShutdownSignals,
  InvalidConfigError,
  shutdownEventLogger,
  stderrLogOutput,
  stdoutLogOutput,
} from '@herald/config';
import { registerLogDropMetric } from '@herald/config/log-output-metric';
import { startDispatcherApp } from './app.js';
import { loadDispatcherConfig } from './env.js';
import { createLogger } from './logger.js';

// Logs never block or throw, whatever their reader does (see log-output.ts in @herald/config).
const logs = stdoutLogOutput();
const errors = stderrLogOutput();

const config = await Promise.resolve()
  .then(() => loadDispatcherConfig())
  .catch((error: unknown) => {
    if (!(error instanceof InvalidConfigError)) throw error;
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
// Everything, attempts in flight included, gets SHUTDOWN_GRACE_MS; past it the process exits with 1.
// Installed before the ready line: whoever reads that line may signal at once, and a signal that comes
// before a handler is installed ends the process on the spot.
handleShutdownSignals({
  stop: () => app.stop(),
  hardExitMs: config.http.shutdownGraceMs,
  beforeExit: (timeoutMs) => Promise.all([logs.flush(timeoutMs), errors.flush(timeoutMs)]).then(() => {}),
  onEvent: shutdownEventLogger(logger),
});

const { address } = app;
logger.info(
  { address: address.address, port: address.port, redisPrefix: config.redisPrefix },
  'herald webhook dispatcher ready',
);
