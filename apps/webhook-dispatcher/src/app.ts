import type { AddressInfo } from 'node:net';
import { createLifecycle, type Lifecycle, type LifecyclePart, READY } from '@herald/config';
import { registerLiveHeapMetric } from '@herald/config/live-heap-metric';
import { createRedisClient } from '@herald/config/redis';
import { webhookRedisKeys } from '@herald/contracts';
import { createDatabase, migrateToLatest } from '@herald/db';
import {
  createDispatcher,
  createOutboxWakeListener,
  createRedisStreamQueue,
  type DispatcherStep,
} from '@herald/webhook-engine';
import { collectDefaultMetrics, type Registry } from 'prom-client';
import type { DispatcherConfig } from './env.js';
import type { Logger } from './logger.js';
import { createOpsServer } from './ops-server.js';

export interface DispatcherApp {
  /** The parts, in start order: database, queue, throttles-redis, dispatcher, outbox-wake, ops-http. */
  lifecycle: Lifecycle;
  /** The dispatcher's metrics, served on `/metrics`. */
  registry: Registry;
  /** Where the ops server listens. */
  address: AddressInfo;
  /** Stops the parts in reverse order (the ops server first, the database last). Idempotent. */
  stop(): Promise<void>;
}

/**
 * Starts the webhook dispatcher app: migrates the database, starts the dispatcher on the Redis stream,
 * listens for the API pods' outbox wake-ups, and serves `/health`, `/readiness` and `/metrics`.
 * Each part that fails to start logs one fatal line naming what failed; a part that fails while it is
 * made, between two starts, logs "webhook dispatcher could not start". Either way everything already
 * opened is closed before the error is rethrown.
 */
export async function startDispatcherApp(
  config: DispatcherConfig,
  logger: Logger,
  options: {
    onStep?: (step: DispatcherStep) => void;
    /** Called as each part joins the lifecycle, before it starts (tests make one throw there). */
    onPartAdded?: (name: string) => void;
  } = {},
): Promise<DispatcherApp> {
  const lifecycle = createLifecycle({
    onStopError: (part, error) => logger.warn({ err: error, part }, 'stopping a part failed'),
  });
  const logged = new WeakSet<object>();
  const fatal = (error: unknown, message: string) => {
    logger.fatal({ err: error }, message);
    if (typeof error === 'object' && error !== null) logged.add(error);
  };
  const add = (part: LifecyclePart) => {
    lifecycle.add(part);
    options.onPartAdded?.(part.name);
  };
  /** Adds `part` and starts it; a failure is logged as `failure` and rethrown (everything released). */
  const start = async (part: LifecyclePart, failure: string) => {
    add(part);
    await lifecycle.start().catch((error: unknown) => {
      fatal(error, failure);
      throw error;
    });
  };

  try {
    return await assemble();
  } catch (error) {
    // Whatever started before the failure (the database pool, Redis clients) is released here too.
    await lifecycle.stop();
    if (typeof error !== 'object' || error === null || !logged.has(error))
      fatal(error, 'webhook dispatcher could not start');
    throw error;
  }

  async function assemble(): Promise<DispatcherApp> {
    // Prepared: the engine's few statements are large CTEs whose planning costs more than running them.
    const database = await createDatabase({
      kind: 'postgres',
      url: config.databaseUrl,
      poolMax: config.databasePoolMax,
      preparedStatements: config.databasePreparedStatements,
    }).catch((error: unknown) => {
      fatal(error, 'database could not be opened');
      throw error;
    });
    await start(
      {
        name: 'database',
        // Safe beside API pods doing the same: Kysely's migrator takes a lock. The dispatcher may start first.
        start: async () => void (await migrateToLatest(database.db)),
        stop: () => database.close(),
        // The dispatcher's readiness pings it.
        readiness: () => READY,
      },
      'database migration failed',
    );

    const keys = webhookRedisKeys(config.redisPrefix);
    const queue = createRedisStreamQueue({ redisUrl: config.redisUrl, keys, logger });
    add({ name: 'queue', start() {}, stop: () => queue.close(), readiness: () => READY });
    // The throttles shared by every dispatcher (endpoints' rate limits, organisations' attempts in flight)
    // get a client of their own, with the offline queue off: while Redis is away a throttle answers from
    // this dispatcher's local share at once instead of waiting behind a queue of retried commands.
    const throttlesRedis = createRedisClient(config.redisUrl, { enableOfflineQueue: false });
    throttlesRedis.on('error', (error) => logger.warn({ err: error }, 'redis connection error (webhook throttles)'));
    add({
      name: 'throttles-redis',
      start() {},
      stop: () => void throttlesRedis.disconnect(),
      readiness: () => READY,
    });
    const dispatcher = createDispatcher({
      db: database.db,
      throttles: { redis: throttlesRedis, keys },
      databaseUrl: config.databaseUrl,
      queue,
      logger,
      settings: { ...config.webhooks, databaseConnections: config.databasePoolMax },
      keyring: config.encryptionKeys,
      onStep: options.onStep,
    });
    await start(
      {
        name: 'dispatcher',
        start: () => dispatcher.start(),
        stop: () => dispatcher.stop(),
        // Running, not stopping, and the database and the queue answer; else why not.
        readiness: () => dispatcher.readiness(),
      },
      'webhook dispatcher could not start',
    );

    // API pods announce their publishPost commits on Redis (no NOTIFY there, see outbox-wake.ts).
    const wake = createOutboxWakeListener({
      redisUrl: config.redisUrl,
      channel: keys.outboxWakeChannel,
      logger,
      onWake: () => dispatcher.notifyOutbox(),
    });
    await start(
      { name: 'outbox-wake', start: () => wake.start(), stop: () => wake.stop(), readiness: () => READY },
      'could not subscribe to the outbox wake-up channel',
    );

    // The process's own figures (resident memory, CPU, V8 heap, event loop, GC), as the API serves them under
    // `herald_api_`: a dispatcher's memory over days is watched here, not only from the outside.
    collectDefaultMetrics({ register: dispatcher.metrics.registry, prefix: 'herald_dispatcher_' });
    registerLiveHeapMetric(dispatcher.metrics.registry, 'herald_dispatcher_');
    const ops = createOpsServer({
      registry: dispatcher.metrics.registry,
      readiness: () => lifecycle.readiness(),
    });
    await start(
      {
        name: 'ops-http',
        start: () =>
          new Promise<void>((resolve, reject) => {
            ops.once('error', reject);
            ops.listen(config.http.port, config.http.host, () => {
              ops.off('error', reject);
              resolve();
            });
          }),
        // Stops accepting; open probe connections are not waited for (as before: a probe is short).
        stop: () => void ops.close(),
        readiness: () => READY,
      },
      `cannot listen on ${config.http.host}:${config.http.port}`,
    );

    return {
      lifecycle,
      registry: dispatcher.metrics.registry,
      address: ops.address() as AddressInfo,
      stop: () => lifecycle.stop(),
    };
  }
}
