import { InvalidConfigError } from '@herald/config';
import { createApp } from './app.js';
import { DEMO_USER } from './dev-credentials.js';
import { loadApiConfig } from './env.js';
import { createLogger } from './logger.js';
import { CONSOLE_PATH } from './plugins/use-console.js';
import { GRAPHQL_PATH } from './server.js';

let config: ReturnType<typeof loadApiConfig>;
try {
  config = loadApiConfig();
} catch (error) {
  if (error instanceof InvalidConfigError) {
    for (const line of error.lines) process.stderr.write(`herald: invalid configuration: ${line}\n`);
    process.exit(1);
  }
  throw error;
}

const logger = createLogger(config.logLevel);
logger.info(
  { mode: config.mode, database: config.database.kind, pubsub: config.redisUrl ? 'redis' : 'memory' },
  `herald api starting in ${config.mode} mode`,
);
const app = await createApp(config, logger).catch((error: unknown) => {
  logger.fatal({ err: error }, 'start-up failed');
  process.exit(1);
});
const address = await app.listen().catch((error: unknown) => {
  logger.fatal({ err: error }, `cannot listen on ${config.http.host}:${config.http.port}`);
  process.exit(1);
});
logger.info(
  { mode: config.mode, database: config.database.kind, address: address.address, port: address.port },
  'herald api listening',
);

if (app.devToken) {
  const host = config.http.host === '0.0.0.0' || config.http.host === '::' ? 'localhost' : config.http.host;
  const token = app.devToken;
  process.stderr.write(
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

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    logger.info({ signal }, 'shutting down');
    const hardExit = setTimeout(
      () => {
        logger.error('shutdown grace period exceeded; exiting');
        process.exit(1);
      },
      config.http.drainDelayMs + config.http.shutdownGraceMs + 5_000,
    );
    hardExit.unref();
    app.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  });
}
