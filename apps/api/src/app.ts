import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { createTokenVerifier, type TokenKeySource } from '@herald/auth';
import type { EncryptionKeyring } from '@herald/config';
import { createRedisClient } from '@herald/config/redis';
import { webhookRedisKeys } from '@herald/contracts';
import { createDatabase, type HeraldDatabase, migrateToLatest, prepareWebhookSecrets } from '@herald/db';
import { countOrgPermits, createEmbeddedDispatcher, type Dispatcher } from '@herald/webhook-engine';
import { type ConsoleAssets, findConsoleDir, loadConsoleAssets } from './console-assets.js';
import { loadOrCreateDevEncryptionKeys, loadOrCreateDevSecret, signDevToken } from './dev-credentials.js';
import type { ApiConfig } from './env.js';
import type { Logger } from './logger.js';
import { type ApiMetrics, createApiMetrics } from './metrics.js';
import { createPubSubService, type PubSubService } from './realtime/pubsub.js';
import { createSocketRebalancer, type SocketRebalancer } from './realtime/socket-rebalancer.js';
import { createServer, type HeraldServer } from './server.js';
import { createTenantQuotas, type TenantQuotas } from './tenancy/tenant-quotas.js';

/** How long start-up waits for Redis (cluster mode) before giving up. */
const REDIS_CONNECT_TIMEOUT_MS = 10_000;
/** During shutdown, how often connections that went idle are closed. */
const IDLE_SWEEP_INTERVAL_MS = 100;

export interface HeraldApp extends HeraldServer {
  database: HeraldDatabase;
  pubsub: PubSubService;
  metrics: ApiMetrics;
  /** Tenant quotas (docs/tenancy.md). */
  quotas: TenantQuotas;
  /** The generated development secret, in embedded mode without a configured key. */
  devSecret: string | undefined;
  /** A 30-day token for the demo user, signed with `devSecret` (printed by main.ts); undefined without it. */
  devToken: string | undefined;
  /** Starts listening on the configured host and port (port 0 picks a free one). */
  listen(): Promise<AddressInfo>;
  /**
   * Graceful stop: readiness turns false; for `drainDelayMs` the server keeps accepting and serving (so
   * a load balancer sees the 503 and stops sending work); then it stops accepting, WebSockets are closed with 1012
   * (clients reconnect to another pod), in-flight requests finish (idle keep-alive connections are
   * closed), then Redis and the database close. After `shutdownGraceMs` whatever is left is cut.
   * Idempotent.
   */
  stop(): Promise<void>;
}

/** Opens the database, migrates it, and wires the server. Everything `main.ts` starts. */
export async function createApp(config: ApiConfig, logger: Logger): Promise<HeraldApp> {
  // Before anything is opened: a wrong HERALD_CONSOLE_DIR stops the start at once.
  const consoleAssets = loadConsole(config, logger);
  const database = await createDatabase(config.database, {
    onConnectionError: (error) => logger.warn({ err: error }, 'database connection lost; reconnecting on next query'),
    onEmbeddedCreated: (created) => {
      if (created.from === 'template') {
        logger.info({ ms: created.ms }, 'embedded database created from the template');
      } else {
        logger.info(
          { ms: created.ms, reason: created.reason },
          'embedded database created by initdb (template not used); migrating',
        );
      }
    },
  });
  try {
    const results = await migrateToLatest(database.db);
    for (const result of results) logger.info({ migration: result.migrationName, status: result.status }, 'migration');
  } catch (error) {
    await database.close();
    throw error;
  }
  // Webhook signing secrets are sealed under this keyring (docs/operations.md, "Webhook encryption keys"): rows
  // still in plaintext are sealed now, and a keyring that does not open what is stored stops the start.
  let keyring: EncryptionKeyring;
  try {
    keyring = config.webhooks.encryptionKeys ?? loadOrCreateDevEncryptionKeys(config.dataDir);
    const { sealed } = await prepareWebhookSecrets(database.db, keyring);
    if (sealed > 0) logger.info({ sealed }, 'webhook signing secrets sealed under HERALD_ENCRYPTION_KEYS');
  } catch (error) {
    await database.close();
    throw error;
  }

  let devSecret: string | undefined;
  let key: TokenKeySource | undefined = config.auth.key;
  if (!key) {
    devSecret = loadOrCreateDevSecret(config.dataDir);
    key = { kind: 'secret', secret: devSecret };
  }
  const verifier = createTokenVerifier({
    key,
    issuer: config.auth.issuer,
    audience: config.auth.audience,
    onKeySourceError: (error) => logger.warn({ err: error }, 'JWT_JWKS_URL unreachable: answering AUTH_UNAVAILABLE'),
  });
  const metrics = createApiMetrics();
  // --- webhooks -----------------------------------------------------------------------------------
  // Without Redis there is no stream for the webhook-dispatcher app to read, so the same dispatcher
  // runs in this process on the database-backed queue (embedded and single mode, README "Modes"). With Redis, separate
  // dispatcher processes deliver and this process only writes the outbox. Made here, started below:
  // publishes wake it in process (`wakeWebhookDispatcher`).
  const webhookDispatcher = config.redisUrl
    ? undefined
    : createEmbeddedDispatcher({
        db: database.db,
        logger,
        settings: config.webhooks,
        registry: metrics.registry,
        databaseUrl: config.database.kind === 'postgres' ? config.database.url : undefined,
        keyring,
      });
  // --- end webhooks -------------------------------------------------------------------------------
  const pubsub = createPubSubService({
    redisUrl: config.redisUrl,
    redisPrefix: config.redisPrefix,
    limits: config.subscriptionHistory,
    replayConcurrency: config.subscriptionReplayConcurrency,
    db: database.db,
    wakeWebhookDispatcher: webhookDispatcher?.notifyOutbox,
    logger,
    metrics,
  });
  try {
    await pubsub.ready(REDIS_CONNECT_TIMEOUT_MS);
  } catch (error) {
    await Promise.all([pubsub.close(), database.close()]);
    throw error;
  }
  const quotas = createQuotas(config, database, metrics, logger, webhookDispatcher);
  quotas.start();
  // Its Redis connection, so the first requests are counted cluster-wide (meanwhile: this pod's share).
  await quotas.connected(REDIS_CONNECT_TIMEOUT_MS);
  const devToken = devSecret ? await signDevToken(devSecret, config.auth.issuer, config.auth.audience) : undefined;
  const server = createServer({
    config: { ...config, webhooks: { ...config.webhooks, encryptionKeys: keyring } },
    database,
    verifier,
    logger,
    pubsub,
    metrics,
    quotas,
    // The console pre-fills the development token only in development: a production server never hands
    // out a token, even one it generated itself.
    console: { assets: consoleAssets, devToken: config.env === 'development' ? devToken : undefined },
  });
  const { httpServer } = server;

  await webhookDispatcher?.start(); // webhooks, see above

  // Cluster mode: even out sockets across pods (see realtime/socket-rebalancer.ts and docs/scaling.md).
  let rebalancer: SocketRebalancer | undefined;
  if (config.redisUrl && config.ws.rebalance) {
    const redis = createRedisClient(config.redisUrl, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      connectionName: 'herald-api-rebalance',
    });
    redis.on('error', (error: Error) => logger.debug({ err: error }, 'rebalance redis connection error'));
    const rebalancing = createSocketRebalancer({
      redis,
      prefix: config.redisPrefix,
      podId: `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`,
      openSockets: () => server.webSockets.size,
      shed: (count) => server.webSockets.shed(count),
      logger,
    });
    rebalancer = {
      ...rebalancing,
      async stop() {
        await rebalancing.stop();
        redis.disconnect();
      },
    };
    rebalancer.start();
  }

  let stopping: Promise<void> | undefined;
  return {
    yoga: server.yoga,
    httpServer,
    webSockets: server.webSockets,
    drain: server.drain,
    get draining() {
      return server.draining;
    },
    database,
    pubsub,
    metrics,
    quotas,
    devSecret,
    devToken,
    listen() {
      return new Promise((resolve, reject) => {
        httpServer.once('error', reject);
        httpServer.listen(config.http.port, config.http.host, () => {
          httpServer.off('error', reject);
          resolve(httpServer.address() as AddressInfo);
        });
      });
    },
    stop() {
      stopping ??= (async () => {
        server.drain();
        if (config.http.drainDelayMs > 0) {
          logger.info({ drainDelayMs: config.http.drainDelayMs }, 'draining: /readiness answers 503, still serving');
          await new Promise((resolve) => setTimeout(resolve, config.http.drainDelayMs));
        }
        await rebalancer?.stop();
        const closed = new Promise<void>((resolve) => httpServer.close(() => resolve()));
        // Keep-alive connections become idle as their in-flight request finishes: close them as they do.
        httpServer.closeIdleConnections();
        const sweep = setInterval(() => httpServer.closeIdleConnections(), IDLE_SWEEP_INTERVAL_MS);
        const timer = setTimeout(() => {
          logger.warn('shutdown grace period over: cutting remaining connections');
          httpServer.closeAllConnections();
          server.webSockets.terminate();
        }, config.http.shutdownGraceMs);
        timer.unref();
        await server.webSockets.close();
        await closed;
        clearInterval(sweep);
        clearTimeout(timer);
        await quotas.stop();
        await pubsub.close();
        await webhookDispatcher?.stop(); // webhooks: attempts in flight finish before the database closes
        await database.close();
      })();
      return stopping;
    },
  };
}

/** How long a quota check waits for Redis before this pod's local share answers it. */
const QUOTA_REDIS_TIMEOUT_MS = 250;

/**
 * Tenant quotas: counted in Redis in cluster mode (their own connection, which fails fast while Redis
 * is away so each check falls back to the pod's share at once), in memory otherwise.
 */
function createQuotas(
  config: ApiConfig,
  database: HeraldDatabase,
  metrics: ApiMetrics,
  logger: Logger,
  webhookDispatcher: Dispatcher | undefined,
): TenantQuotas & { connected(timeoutMs: number): Promise<void> } {
  let redis: ReturnType<typeof createRedisClient> | undefined;
  if (config.redisUrl) {
    redis = createRedisClient(config.redisUrl, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: QUOTA_REDIS_TIMEOUT_MS,
      connectionName: 'herald-api-quotas',
    });
    redis.on('error', (error: Error) => logger.debug({ err: error }, 'quota redis connection error'));
  }
  const quotas = createTenantQuotas({
    db: database.db,
    defaults: config.tenantLimits,
    redis,
    redisPrefix: config.redisPrefix,
    podId: `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`,
    logger,
    onRefusal: (quota) => metrics.tenantRefusals.labels(quota).inc(),
    onFallback: () => metrics.tenantQuotaFallbacks.inc(),
    // The in-process dispatcher counts its own; with Redis, the permits the dispatcher processes hold.
    webhookAttemptsInFlight: webhookDispatcher
      ? (orgId) => webhookDispatcher.attemptsInFlight(orgId)
      : redis
        ? (orgId) => countOrgPermits(redis, webhookRedisKeys(config.redisPrefix), orgId)
        : undefined,
  });
  const stop = quotas.stop;
  // The quotas' own Redis connection closes with them.
  quotas.stop = async () => {
    await stop();
    redis?.disconnect();
  };
  return Object.assign(quotas, {
    /** Resolves once the quotas' Redis connection is ready, or after `timeoutMs` (never rejects). */
    connected(timeoutMs: number): Promise<void> {
      const client = redis;
      if (!client || client.status === 'ready') return Promise.resolve();
      return new Promise<void>((resolve) => {
        const timer = setTimeout(done, timeoutMs);
        client.once('ready', done);
        function done() {
          clearTimeout(timer);
          client?.off('ready', done);
          resolve();
        }
      });
    },
  });
}

/**
 * The built console, or undefined (with a warning; /console then says how to build it) when none is
 * found. A configured HERALD_CONSOLE_DIR without a console is a start-up error.
 */
function loadConsole(config: ApiConfig, logger: Logger): ConsoleAssets | undefined {
  const dir = findConsoleDir(config.console.dir);
  if (!dir) {
    logger.warn('console: no build found; /console answers 503 until `pnpm --filter @herald/console build` runs');
    return undefined;
  }
  if (config.console.dir === undefined) logger.debug({ dir }, 'console: serving the build');
  return loadConsoleAssets(dir);
}
