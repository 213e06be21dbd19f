import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { countRetryBacklog, type Database, fanOutEvent } from '@herald/db';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { createDeliveryAttempter, type DeliveryAttempter } from './attempt-delivery.js';
import { createConsumer } from './consumer.js';
import { createDeliverer, type Deliverer } from './deliver.js';
import { createDispatcherMetrics, type DispatcherMetrics } from './metrics.js';
import type { WebhookQueue } from './queue/webhook-queue.js';
import { createRelay } from './relay.js';
import { createScheduler } from './scheduler.js';

/** Tunables of a dispatcher. The first four come from the environment (SPEC §3). */
export interface DispatcherSettings {
  /** Per attempt, connection included (`WEBHOOK_TIMEOUT_MS`). */
  timeoutMs: number;
  /** First retry delay; later ones double, with jitter (`WEBHOOK_RETRY_BASE_MS`). */
  retryBaseMs: number;
  /** Dead-letter a delivery whose next retry would fall after this age (`WEBHOOK_RETRY_HORIZON`). */
  retryHorizonMs: number;
  /** Allow receivers on loopback and private addresses (`WEBHOOK_ALLOW_PRIVATE_URLS`). */
  allowPrivateUrls: boolean;
  /** Work items (attempts, fan-outs) in hand at once. @default 100 */
  concurrency?: number;
  /** Deliveries per endpoint queued or in flight at once, across all dispatchers. @default 10 */
  endpointConcurrency?: number;
  /** How often the outbox and due retries are looked for when idle. @default 500 */
  pollIntervalMs?: number;
  /**
   * An outbox event or delivery handed to the queue and not picked up within this long is handed out
   * again (the queue lost it). Must exceed the queue's normal backlog. @default 120000
   */
  requeueAfterMs?: number;
  /** Outbox events relayed, and due deliveries handed out, per pass. @default 200 */
  batchSize?: number;
}

export interface DispatcherDeps {
  db: Kysely<Database>;
  queue: WebhookQueue;
  logger: Logger;
  settings: DispatcherSettings;
  /** The name in the consumer group. @default `<hostname>-<pid>-<random>` */
  consumerName?: string;
  /** Where the metrics are registered. @default a new registry */
  registry?: Registry;
  /** Random source for retry jitter. @default Math.random */
  random?: () => number;
}

export interface Dispatcher {
  /** Creates the queue's stream and group if needed, then starts the relay, scheduler and consumer. */
  start(): Promise<void>;
  /**
   * Stops taking work, lets attempts in flight finish (each is bounded by the timeout), acknowledges
   * them and closes the HTTP connections. Does not close the database or the queue (their owner does).
   * Idempotent.
   */
  stop(): Promise<void>;
  /** True while started, not stopping, and the database and the queue answer. */
  readiness(): Promise<boolean>;
  metrics: DispatcherMetrics;
  consumerName: string;
}

/**
 * Wires one dispatcher (SPEC §7): the relay moves outbox events into the queue; the consumer reads the
 * queue and either fans an event out into deliveries or makes one delivery attempt; the scheduler
 * hands due deliveries (new ones and retries) to the queue, at most `endpointConcurrency` per endpoint.
 * Any number of dispatchers can share one database and one queue.
 */
export function createDispatcher(deps: DispatcherDeps): Dispatcher {
  const { db, queue, settings } = deps;
  const consumerName = deps.consumerName ?? `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  const logger = deps.logger.child({ consumer: consumerName });
  const concurrency = settings.concurrency ?? 100;
  const endpointConcurrency = settings.endpointConcurrency ?? 10;
  const pollIntervalMs = settings.pollIntervalMs ?? 500;
  const requeueAfterMs = settings.requeueAfterMs ?? 120_000;
  const batchSize = settings.batchSize ?? 200;
  // An attempt takes at most the timeout plus two database writes; the margin covers the writes. Work
  // in flight is taken over only after this long, so a live attempt is not duplicated.
  const leaseMs = settings.timeoutMs + Math.max(1_000, Math.round(settings.timeoutMs / 2));

  const metrics = createDispatcherMetrics(
    { retryBacklog: () => countRetryBacklog(db), streamLag: () => queue.lag() },
    deps.registry,
  );
  let deliverer: Deliverer | undefined;
  const relay = createRelay({ db, queue, logger, batchSize, pollIntervalMs, resendAfterMs: requeueAfterMs });
  const scheduler = createScheduler({
    db,
    queue,
    logger,
    batchSize,
    pollIntervalMs,
    queueLeaseMs: requeueAfterMs,
    endpointConcurrency,
  });
  const consumer = createConsumer({
    queue,
    consumerName,
    concurrency,
    reclaimIdleMs: leaseMs,
    logger,
    async handle(entry) {
      const message = entry.message;
      if (!message) return;
      if (message.kind === 'event') {
        const { found, created } = await fanOutEvent(db, message.eventId);
        if (!found) logger.warn({ eventId: message.eventId }, 'queue names an event the outbox does not have');
        if (created > 0) scheduler.wake();
        return;
      }
      try {
        // The slot this delivery held passes to the endpoint's next due delivery, for a while: a busy
        // endpoint keeps its connections working without a round through the scheduler and the queue.
        // The budget keeps the entry's acknowledgement well within the reclaim time.
        const chainUntil = Date.now() + leaseMs / 2;
        let attempted = await attempter.attempt(message);
        while (attempted && state === 'running' && Date.now() < chainUntil) {
          attempted = await attempter.attemptNext(message.endpointId);
        }
      } finally {
        // The endpoint has a free slot again (or the work item was stale): hand out what waits for it.
        scheduler.wake();
      }
    },
  });
  let attempter: DeliveryAttempter;

  queue.onReset(() => {
    void Promise.all([relay.resend(), scheduler.requeue()]).catch((error: unknown) =>
      logger.error({ err: error }, 'handing work out again after a queue reset failed'),
    );
  });

  let state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  let stopped: Promise<void> | undefined;
  return {
    metrics,
    consumerName,
    async start() {
      if (state !== 'idle') return;
      await queue.init();
      deliverer = createDeliverer({
        timeoutMs: settings.timeoutMs,
        policy: { allowPrivateUrls: settings.allowPrivateUrls },
        connectionsPerEndpoint: endpointConcurrency,
      });
      attempter = createDeliveryAttempter({
        db,
        queue,
        deliverer,
        metrics,
        logger,
        retry: { baseMs: settings.retryBaseMs, horizonMs: settings.retryHorizonMs },
        attemptLeaseMs: leaseMs,
        random: deps.random,
      });
      state = 'running';
      consumer.start();
      scheduler.start();
      relay.start();
      logger.info({ queue: queue.kind, concurrency, endpointConcurrency }, 'webhook dispatcher started');
    },
    stop() {
      stopped ??= (async () => {
        if (state === 'idle') {
          state = 'stopped';
          return;
        }
        state = 'stopping';
        await Promise.all([relay.stop(), scheduler.stop(), consumer.stop()]);
        await deliverer?.close();
        state = 'stopped';
        logger.info('webhook dispatcher stopped');
      })();
      return stopped;
    },
    async readiness() {
      if (state !== 'running' || !relay.healthy || !scheduler.healthy) return false;
      try {
        await Promise.all([queue.ping(), db.selectNoFrom((eb) => eb.lit(1).as('one')).execute()]);
        return true;
      } catch {
        return false;
      }
    },
  };
}
