import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { type EncryptionKeyring, type LifecyclePart, notReady, READY } from '@herald/config';
import { createRedisClient } from '@herald/config/redis';
import { type HeraldDatabase, migrateToLatest, prepareWebhookSecrets } from '@herald/db';
import type { Dispatcher } from '@herald/webhook-engine';
import type { ApiConfig } from './env.js';
import type { Logger } from './logger.js';
import { databaseReadiness, pubsubReadiness } from './readiness.js';
import type { PubSubService } from './realtime/pubsub.js';
import { createSocketRebalancer, type SocketRebalancer } from './realtime/socket-rebalancer.js';
import type { HeraldServer } from './server.js';
import type { TenantQuotas } from './tenancy/tenant-quotas.js';

// The API's long-lived parts, each `{ name, start, stop, readiness }`, registered in start order by
// app.ts (see @herald/config's lifecycle.ts for what the registry guarantees). Readiness is asked
// from the last part to the first, so `/readiness` names draining before Redis before the database.

/** How long start-up waits for Redis (cluster mode) before giving up. */
export const REDIS_CONNECT_TIMEOUT_MS = 10_000;
/** During shutdown, how often connections that went idle are closed. */
const IDLE_SWEEP_INTERVAL_MS = 100;

/** The opened database: migrated at start, closed at stop. */
export function databasePart(database: HeraldDatabase, logger: Logger): LifecyclePart {
  return {
    name: 'database',
    async start() {
      const results = await migrateToLatest(database.db);
      for (const result of results)
        logger.info({ migration: result.migrationName, status: result.status }, 'migration');
    },
    stop: () => database.close(),
    readiness: () => databaseReadiness(database, logger),
  };
}

/**
 * Webhook signing secrets are sealed under the keyring (docs/operations.md, "Webhook encryption keys"):
 * rows still in plaintext are sealed at start, and a keyring that does not open what is stored fails
 * the start. Holds nothing; `keyring` is there once started.
 */
export function webhookSecretsPart(
  database: HeraldDatabase,
  loadKeyring: () => EncryptionKeyring,
  logger: Logger,
): LifecyclePart & { readonly keyring: EncryptionKeyring } {
  let keyring: EncryptionKeyring | undefined;
  return {
    name: 'webhook-secrets',
    async start() {
      const loaded = loadKeyring();
      const { sealed } = await prepareWebhookSecrets(database.db, loaded);
      if (sealed > 0) logger.info({ sealed }, 'webhook signing secrets sealed under HERALD_ENCRYPTION_KEYS');
      keyring = loaded;
    },
    stop() {},
    readiness: () => READY,
    get keyring() {
      if (!keyring) throw new Error('webhook-secrets: the keyring is read after start');
      return keyring;
    },
  };
}

/**
 * The in-process webhook dispatcher (embedded and single mode). Not part of the API's `/readiness`:
 * deliveries that lag do not keep the API from serving GraphQL; the dispatcher's own health shows in
 * its metrics. Its stop lets attempts in flight finish before the database (an earlier part) closes.
 */
export function webhookDispatcherPart(dispatcher: Dispatcher): LifecyclePart {
  return {
    name: 'webhook-dispatcher',
    start: () => dispatcher.start(),
    stop: () => dispatcher.stop(),
    readiness: () => READY,
  };
}

/** Publish and subscribe (Redis or memory): start waits for Redis, bounded by `timeoutMs`. */
export function pubsubPart(pubsub: PubSubService, timeoutMs = REDIS_CONNECT_TIMEOUT_MS): LifecyclePart {
  return {
    name: 'pubsub',
    start: () => pubsub.ready(timeoutMs),
    stop: () => pubsub.close(),
    readiness: () => pubsubReadiness(pubsub),
  };
}

/**
 * Tenant quotas; start waits for their Redis connection (never fails: meanwhile each check counts this
 * pod's share), so the first requests are counted cluster-wide.
 */
export function quotasPart(
  quotas: TenantQuotas & { connected(timeoutMs: number): Promise<void> },
  timeoutMs = REDIS_CONNECT_TIMEOUT_MS,
): LifecyclePart {
  return {
    name: 'quotas',
    async start() {
      quotas.start();
      await quotas.connected(timeoutMs);
    },
    stop: () => quotas.stop(),
    readiness: () => READY,
  };
}

/**
 * The HTTP listener. Start listens on the configured host and port (port 0 picks a free one; a taken
 * port fails the start). Stop: no new connections, WebSockets closed with 1012 (clients reconnect to
 * another pod), in-flight requests finish (idle keep-alive connections are closed as they go idle);
 * after `shutdownGraceMs` whatever is left is cut.
 */
export function httpPart(
  server: HeraldServer,
  http: ApiConfig['http'],
  logger: Logger,
): LifecyclePart & { readonly address: AddressInfo | undefined } {
  const { httpServer } = server;
  let address: AddressInfo | undefined;
  return {
    name: 'http',
    start() {
      return new Promise<void>((resolve, reject) => {
        httpServer.once('error', reject);
        httpServer.listen(http.port, http.host, () => {
          httpServer.off('error', reject);
          address = httpServer.address() as AddressInfo;
          resolve();
        });
      });
    },
    async stop() {
      const closed = new Promise<void>((resolve) => httpServer.close(() => resolve()));
      // Keep-alive connections become idle as their in-flight request finishes: close them as they do.
      httpServer.closeIdleConnections();
      const sweep = setInterval(() => httpServer.closeIdleConnections(), IDLE_SWEEP_INTERVAL_MS);
      const timer = setTimeout(() => {
        logger.warn('shutdown grace period over: cutting remaining connections');
        httpServer.closeAllConnections();
        server.webSockets.terminate();
      }, http.shutdownGraceMs);
      timer.unref();
      await server.webSockets.close();
      await closed;
      clearInterval(sweep);
      clearTimeout(timer);
    },
    readiness: () => READY,
    get address() {
      return address;
    },
  };
}

/**
 * Cluster mode: evens out sockets across pods (realtime/socket-rebalancer.ts, docs/scaling.md). Its
 * Redis connection is made at start and dropped at stop.
 */
export function socketRebalancerPart(
  config: Pick<ApiConfig, 'redisPrefix'> & { redisUrl: string },
  server: HeraldServer,
  logger: Logger,
): LifecyclePart {
  let redis: ReturnType<typeof createRedisClient> | undefined;
  let rebalancer: SocketRebalancer | undefined;
  return {
    name: 'socket-rebalancer',
    start() {
      redis = createRedisClient(config.redisUrl, {
        enableOfflineQueue: false,
        maxRetriesPerRequest: 1,
        connectionName: 'herald-api-rebalance',
      });
      redis.on('error', (error: Error) => logger.debug({ err: error }, 'rebalance redis connection error'));
      rebalancer = createSocketRebalancer({
        redis,
        prefix: config.redisPrefix,
        podId: `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`,
        openSockets: () => server.webSockets.size,
        shed: (count) => server.webSockets.shed(count),
        logger,
      });
      rebalancer.start();
    },
    async stop() {
      await rebalancer?.stop();
      redis?.disconnect();
    },
    // Shedding is best effort: a pod whose rebalancer cannot reach Redis still serves (Redis's own
    // readiness is the pubsub part's).
    readiness: () => READY,
  };
}

/**
 * The first part to stop: `/readiness` answers 503 ("draining") from then on, and for `drainDelayMs`
 * the server keeps accepting and serving, so a load balancer sees the 503 and stops sending work.
 */
export function drainPart(server: HeraldServer, drainDelayMs: number, logger: Logger): LifecyclePart {
  return {
    name: 'drain',
    start() {},
    async stop() {
      server.drain();
      if (drainDelayMs > 0) {
        logger.info({ drainDelayMs }, 'draining: /readiness answers 503, still serving');
        await new Promise((resolve) => setTimeout(resolve, drainDelayMs));
      }
    },
    readiness: () => (server.draining ? notReady('draining') : READY),
  };
}
