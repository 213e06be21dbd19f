import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { createTokenVerifier, type TokenKeySource } from '@herald/auth';
import { createLifecycle, type Lifecycle } from '@herald/config';
import { createRedisClient } from '@herald/config/redis';
import { webhookRedisKeys } from '@herald/contracts';
import { createDatabase, type HeraldDatabase } from '@herald/db';
import { countOrgPermits, createEmbeddedDispatcher, type Dispatcher } from '@herald/webhook-engine';
import {
  databasePart,
  drainPart,
  httpPart,
  pubsubPart,
  quotasPart,
  socketRebalancerPart,
  webhookDispatcherPart,
  webhookSecretsPart,
} from './app-parts.js';
import { type ConsoleAssets, findConsoleDir, loadConsoleAssets } from './console-assets.js';
import { loadOrCreateDevEncryptionKeys, loadOrCreateDevSecret, signDevToken } from './dev-credentials.js';
import type { ApiConfig } from './env.js';
import type { Logger } from './logger.js';
import { type ApiMetrics, createApiMetrics } from './metrics.js';
import { createPubSubService, type PubSubService } from './realtime/pubsub.js';
import { createServer, type HeraldServer } from './server.js';
import { createTenantQuotas, type TenantQuotas } from './tenancy/tenant-quotas.js';

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
  /** The app's parts, in start order (app-parts.ts); what `/readiness` answers comes from here. */
  lifecycle: Lifecycle;
  /**
   * Starts listening on the configured host and port (port 0 picks a free one), then the parts that
   * need a listening server. When listening fails, everything the app opened is released (the database,
   * Redis connections, timers) before the error is rethrown.
   */
  listen(): Promise<AddressInfo>;
  /**
   * Graceful stop, the parts in reverse order: readiness turns false; for `drainDelayMs` the server keeps
   * accepting and serving (so a load balancer sees the 503 and stops sending work); then it stops
   * accepting, WebSockets are closed with 1012 (clients reconnect to another pod), in-flight requests
   * finish (idle keep-alive connections are closed), then Redis and the database close. After
   * `shutdownGraceMs` whatever is left is cut. Idempotent.
   */
  stop(): Promise<void>;
}

/**
 * Opens the database, migrates it, and wires the server: every part `main.ts` starts, registered in one
 * lifecycle (app-parts.ts). The parts up to the HTTP listener start here; `listen()` starts the rest.
 * A part that fails to start releases every part already made.
 */
export async function createApp(config: ApiConfig, logger: Logger): Promise<HeraldApp> {
  // Before anything is opened: a wrong HERALD_CONSOLE_DIR stops the start at once.
  const consoleAssets = loadConsole(config, logger);
  const metrics = createApiMetrics();
  const database = await createDatabase(config.database, {
    onFastPathFallback: (path, reason) => {
      metrics.fastPathFallback.labels(path).set(1);
      logger.warn({ path, reason }, 'fast path off: embedded statements run unnamed (planned on every call)');
    },
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
  const lifecycle = createLifecycle({
    onStopError: (part, error) => logger.warn({ err: error, part }, 'stopping a part failed'),
  });
  // Whatever fails from here on (a part's start, or wiring between starts) closes what was made.
  return assemble(config, logger, { consoleAssets, metrics, database, lifecycle }).catch(async (error: unknown) => {
    await lifecycle.stop().catch(() => {});
    throw error;
  });
}

/** The parts after the database, registered in start order; the first ones are started. */
async function assemble(
  config: ApiConfig,
  logger: Logger,
  made: {
    consoleAssets: ConsoleAssets | undefined;
    metrics: ApiMetrics;
    database: HeraldDatabase;
    lifecycle: Lifecycle;
  },
): Promise<HeraldApp> {
  const { consoleAssets, metrics, database, lifecycle } = made;
  lifecycle.add(databasePart(database, logger));
  const secrets = lifecycle.add(
    webhookSecretsPart(
      database,
      () => config.webhooks.encryptionKeys ?? loadOrCreateDevEncryptionKeys(config.dataDir),
      logger,
    ),
  );
  await lifecycle.start();
  const keyring = secrets.keyring;

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
  // --- webhooks -----------------------------------------------------------------------------------
  // Without Redis there is no stream for the webhook-dispatcher app to read, so the same dispatcher
  // runs in this process on the database-backed queue (embedded and single mode, docs/api.md "Modes"). With Redis, separate
  // dispatcher processes deliver and this process only writes the outbox. Publishes wake it in process
  // (`wakeWebhookDispatcher`).
  const webhookDispatcher = config.redisUrl
    ? undefined
    : createEmbeddedDispatcher({
        db: database.db,
        logger,
        settings: {
          ...config.webhooks,
          databaseConnections: config.database.kind === 'postgres' ? config.database.poolMax : undefined,
        },
        registry: metrics.registry,
        databaseUrl: config.database.kind === 'postgres' ? config.database.url : undefined,
        keyring,
      });
  if (webhookDispatcher) lifecycle.add(webhookDispatcherPart(webhookDispatcher));
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
  lifecycle.add(pubsubPart(pubsub));
  const quotas = createQuotas(config, database, metrics, logger, webhookDispatcher);
  lifecycle.add(quotasPart(quotas));
  await lifecycle.start();
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
    readiness: () => lifecycle.readiness(),
  });
  // Started by `listen()`; stopped (in reverse: drain first) by `stop()` whether or not it listened.
  const http = lifecycle.add(httpPart(server, config.http, logger));
  if (config.redisUrl && config.ws.rebalance) {
    lifecycle.add(socketRebalancerPart({ redisUrl: config.redisUrl, redisPrefix: config.redisPrefix }, server, logger));
  }
  lifecycle.add(drainPart(server, config.http.drainDelayMs, logger));

  return {
    yoga: server.yoga,
    httpServer: server.httpServer,
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
    lifecycle,
    async listen() {
      await lifecycle.start();
      return http.address as AddressInfo;
    },
    stop: () => lifecycle.stop(),
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
    concurrentOperationsPerPod: config.concurrentOperationsPerPod,
    // Alone on the pod, a tenant may keep all but one connection of the pool busy: the one left is for
    // the next tenant's first request, which would otherwise wait for one of the lone tenant's queries to
    // end (PGlite has one connection: turns as usual).
    concurrentOperationsAlone:
      config.database.kind === 'postgres' && config.database.poolMax !== undefined
        ? config.database.poolMax - 1
        : undefined,
    onTurnWait: () => metrics.tenantOperationsWaited.inc(),
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
