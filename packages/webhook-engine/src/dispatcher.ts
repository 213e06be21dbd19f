import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { notReady, READY, type Readiness } from '@herald/config';
import type { RedisClient } from '@herald/config/redis';
import type { WebhookRedisKeys } from '@herald/contracts';
import {
  countRetryBacklog,
  type Database,
  DEFAULT_POOL_MAX,
  POOL_CONNECT_TIMEOUT_MS,
  prepareWebhookSecrets,
  type SecretKeyring,
} from '@herald/db';
import { type Kysely, sql } from 'kysely';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { type BatchAttempter, createBatchAttempter } from './attempt-batch.js';
import { type AttemptGate, createAttemptGate } from './attempt-gate.js';
import { createConsumer } from './consumer.js';
import { createDeliverer, type Deliverer } from './deliver.js';
import { createDispatcherPresence } from './dispatcher-presence.js';
import { createEndpointLanes, type EndpointLanes } from './endpoint-lanes.js';
import { createEndpointRate } from './endpoint-rate.js';
import { createDispatcherMetrics, type DispatcherMetrics } from './metrics.js';
import { createOrgCaps } from './org-caps.js';
import { createOrgPermits } from './org-permits.js';
import { createOutboxListener, listenInProcess, type OutboxListener } from './outbox-listener.js';
import type { WebhookQueue } from './queue/webhook-queue.js';
import { createRelay } from './relay.js';
import { createRetention, type Retention } from './retention.js';
import { createScheduler } from './scheduler.js';
import { createSecretCache } from './secret-cache.js';
import { createStatementTurns, laneStatementCapacity } from './statement-turns.js';

/** `WEBHOOK_DISABLE_AFTER`'s default: 5 days. */
export const DEFAULT_DISABLE_AFTER_MS = 5 * 24 * 3_600_000;
/** `WEBHOOK_RETENTION`'s default: 30 days. */
export const DEFAULT_RETENTION_MS = 30 * 24 * 3_600_000;
/**
 * Outbox events per fan-out statement. A statement has a fixed cost (~1.2 ms of PostgreSQL time at
 * 200 events: bind, executor set-up, commit) beside ~25 µs per event, so a backlog is cheaper in
 * fewer, larger statements: one dispatcher's whole 10,000-event backlog (`pnpm bench --scenarios
 * webhooks`, one endpoint) went 6,467–6,579 → 6,799 deliveries/s at 500 and 6,779–7,154 at 1,000, the
 * same within noise, so the smaller: a statement inserts events × endpoints rows and returns them.
 * At a steady rate a pass takes whatever is there, far fewer. The scheduler's due scan keeps
 * `batchSize`.
 */
export const FAN_OUT_BATCH_SIZE = 500;

/** Tunables of a dispatcher. The first four come from the environment (docs/configuration.md). */
export interface DispatcherSettings {
  /** Per attempt, connection included (`WEBHOOK_TIMEOUT_MS`). */
  timeoutMs: number;
  /** First retry delay; later ones double, with jitter (`WEBHOOK_RETRY_BASE_MS`). */
  retryBaseMs: number;
  /** Dead-letter a delivery whose next retry would fall after this age (`WEBHOOK_RETRY_HORIZON`). */
  retryHorizonMs: number;
  /** Allow receivers on loopback and private addresses (`WEBHOOK_ALLOW_PRIVATE_URLS`). */
  allowPrivateUrls: boolean;
  /**
   * Attempts in flight at once in this dispatcher, all endpoints together (`WEBHOOK_CONCURRENCY`; the
   * attempt gate, attempt-gate.ts), and work entries held at once. @default 200
   */
  concurrency?: number;
  /**
   * Attempts in flight at once for one organisation, across all dispatchers sharing `throttles` (in this
   * dispatcher alone without them) (`TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT`); an organisation's override in
   * `organization_limits` replaces it; 0: no cap. @default 100
   */
  orgConcurrency?: number;
  /** Attempts in flight per endpoint at once, across all dispatchers (enforced at the claim). @default 10 */
  endpointConcurrency?: number;
  /** An endpoint whose every attempt failed for this long is disabled (`WEBHOOK_DISABLE_AFTER`). @default 5 days */
  disableAfterMs?: number;
  /** Succeeded deliveries, their attempts and dispatched outbox rows older than this are deleted (`WEBHOOK_RETENTION`). @default 30 days */
  retentionMs?: number;
  /** How often retention runs. @default 600000 (10 min) */
  retentionIntervalMs?: number;
  /** How often the outbox and due retries are looked for when idle. @default 500 */
  pollIntervalMs?: number;
  /** Due deliveries handed out per scheduler pass. @default 200 */
  batchSize?: number;
  /** Outbox events fanned out per relay statement. @default {@link FAN_OUT_BATCH_SIZE} */
  fanOutBatchSize?: number;
  /** Entries claimed, POSTed and recorded together. @default 50 */
  claimBatchSize?: number;
  /**
   * Connections of the pool `db` draws on (`DATABASE_POOL_MAX`): the lanes' statements take turns by
   * organisation on all but a few of them (statement-turns.ts). @default the pool's default, 10
   */
  databaseConnections?: number;
}

export interface DispatcherDeps {
  db: Kysely<Database>;
  queue: WebhookQueue;
  logger: Logger;
  settings: DispatcherSettings;
  /**
   * `HERALD_ENCRYPTION_KEYS`: opens the endpoints' sealed signing secrets. `start()` seals rows still
   * holding plaintext and rejects (naming the variable) when the keyring does not open what is stored.
   */
  keyring: SecretKeyring;
  /**
   * Cluster mode: where the throttles shared by every dispatcher live (endpoints' rate limits,
   * organisations' attempts in flight). A client of its own is best, with the offline queue off so a
   * throttle answers from its local share at once while Redis is away. @default none: every throttle
   * counts in this process only (embedded mode: the only dispatcher)
   */
  throttles?: { redis: RedisClient; keys: WebhookRedisKeys };
  /** The name in the consumer group. @default `<hostname>-<pid>-<random>` */
  consumerName?: string;
  /** Where the metrics are registered. @default a new registry */
  registry?: Registry;
  /** Random source for retry jitter. @default Math.random */
  random?: () => number;
  /**
   * The PostgreSQL URL, to LISTEN for outbox commits (fan-out right after commit). Without it (PGlite)
   * the commits' notifications are heard on the embedded database's own connection; the relay's poll
   * is the safety net either way, and `notifyOutbox()` wakes it in-process.
   */
  databaseUrl?: string;
  /**
   * Called between the steps of the straight path, for crash tests: `after-fan-out` (deliveries
   * created, not yet in the stream), `after-claim` (a-leases taken, nothing POSTed), `after-post`
   * (answers received, nothing recorded). @default none
   */
  onStep?(step: DispatcherStep): void;
}

export type DispatcherStep = 'after-fan-out' | 'after-claim' | 'after-post';

export interface Dispatcher {
  /** Creates the queue's stream and group if needed, then starts the relay, scheduler and consumer. */
  start(): Promise<void>;
  /**
   * Stops taking work, lets attempts in flight finish (each is bounded by the timeout), acknowledges
   * them and closes the HTTP connections. Does not close the database or the queue (their owner does).
   * Idempotent.
   */
  stop(): Promise<void>;
  /**
   * Ready while started, not stopping, its relay and scheduler passes succeed, and the database and the
   * queue answer; otherwise the reason (`not started`, `stopping`, `stopped`, `outbox relay failing`,
   * `scheduler failing`, `queue unreachable`, `database unreachable`).
   */
  readiness(): Promise<Readiness>;
  metrics: DispatcherMetrics;
  consumerName: string;
  /** Wakes the relay (an outbox event was committed in this process). */
  notifyOutbox(): void;
  /** Runs one retention pass now (tests, operators). */
  runRetention(): ReturnType<Retention['runOnce']>;
  /**
   * An organisation's webhook attempts in flight: the permits all dispatchers hold for it (with
   * `throttles`), else this dispatcher's own count.
   */
  attemptsInFlight(orgId: string): Promise<number>;
}

/**
 * Wires one dispatcher (the protocol is in lease-protocol.ts): the relay fans outbox events
 * out into queued deliveries and XADDs them; the consumer reads batches and hands them to one lane per
 * endpoint, which claims, then keeps its slots POSTing while coalesced records take the next due
 * deliveries (endpoint-lanes.ts); the scheduler queues due retries and anything whose lease expired;
 * retention deletes old rows. Any number of dispatchers can share one database and one queue.
 */
/** Work entries the consumer may hold at once, whatever the attempt cap: they are ids, not attempts. */
const MIN_ENTRIES_HELD = 1_000;

export function createDispatcher(deps: DispatcherDeps): Dispatcher {
  const { db, queue, settings } = deps;
  const consumerName = deps.consumerName ?? `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  const logger = deps.logger.child({ consumer: consumerName });
  const concurrency = settings.concurrency ?? 200;
  const endpointConcurrency = settings.endpointConcurrency ?? 10;
  const pollIntervalMs = settings.pollIntervalMs ?? 500;
  const batchSize = settings.batchSize ?? 200;
  // An attempt takes at most the timeout plus two database writes; the margin covers the writes. Work
  // in flight is taken over only after this long, so a live attempt is not duplicated.
  const leaseMs = settings.timeoutMs + Math.max(1_000, Math.round(settings.timeoutMs / 2));

  const secrets = createSecretCache({ keyring: deps.keyring });
  const metrics = createDispatcherMetrics(
    {
      retryBacklog: () => countRetryBacklog(db),
      streamLag: () => queue.lag(),
      deadDeliveries: async () =>
        countWhere(db, sql`select count(*)::int as n from webhook_deliveries where status = 'DEAD'`),
      disabledEndpoints: async () =>
        countWhere(
          db,
          sql`select count(*)::int as n from webhook_endpoints where status = 'DISABLED' and deleted_at is null`,
        ),
      outboxLagSeconds: () => outboxLagSeconds(db),
    },
    deps.registry,
  );
  const presence = deps.throttles
    ? createDispatcherPresence({
        redis: deps.throttles.redis,
        key: deps.throttles.keys.dispatchers,
        consumerName,
        logger,
      })
    : undefined;
  // Every lane's POSTs take permits here: the dispatcher's cap holds, organisations take turns, and
  // each organisation's own cap holds across dispatchers through the permits it holds in Redis.
  const orgCaps = createOrgCaps({
    db,
    defaultCap: settings.orgConcurrency ?? 100,
    onChange: () => gate.refresh(),
    logger,
  });
  const permits = createOrgPermits({
    redis: deps.throttles?.redis,
    keys: deps.throttles?.keys,
    consumerName,
    leaseMs,
    capOf: (orgId) => orgCaps.capOf(orgId),
    onChange: () => gate.refresh(),
    dispatchers: () => presence?.count() ?? 1,
    inUse: (orgId) => gate.inFlight(orgId),
    waiting: (orgId) => gate.waiting(orgId),
    logger,
  });
  const gate: AttemptGate = createAttemptGate({
    concurrency,
    orgConcurrency: 0,
    orgLimit: (orgId) => permits.limit(orgId),
    onOrgShort: (orgId, demand) => permits.want(orgId, demand),
    onOrgRelease: (orgId) => permits.released(orgId),
    // Not while its cap is first read (a database round trip): that is no throttle.
    onOrgThrottled: (orgId) => {
      if (orgCaps.capOf(orgId) !== undefined) metrics.throttled.inc({ reason: 'org_in_flight' });
    },
  });
  const rate = createEndpointRate({
    redis: deps.throttles?.redis,
    keys: deps.throttles?.keys,
    dispatchers: () => presence?.count() ?? 1,
    onThrottled: () => metrics.throttled.inc({ reason: 'endpoint_rate' }),
    logger,
  });
  // One organisation's busy lanes could otherwise hold every connection, and another's first claim (and
  // the relay's fan-out) would wait behind all of their statements.
  const statements = createStatementTurns({
    capacity: laneStatementCapacity(settings.databaseConnections ?? DEFAULT_POOL_MAX),
    maxWaitMs: POOL_CONNECT_TIMEOUT_MS,
    onWait: () => metrics.statementTurnWaits.inc(),
  });
  let deliverer: Deliverer | undefined;
  let attempter: BatchAttempter | undefined;
  let listener: OutboxListener | undefined;
  const relay = createRelay({
    db,
    queue,
    logger,
    batchSize: settings.fanOutBatchSize ?? FAN_OUT_BATCH_SIZE,
    pollIntervalMs,
    queueLeaseMs: leaseMs,
    onFannedOut: () => deps.onStep?.('after-fan-out'),
  });
  const scheduler = createScheduler({ db, queue, logger, batchSize, pollIntervalMs, queueLeaseMs: leaseMs });
  const retention = createRetention({
    db,
    logger,
    retentionMs: settings.retentionMs ?? DEFAULT_RETENTION_MS,
    intervalMs: settings.retentionIntervalMs ?? 600_000,
  });
  const consumer = createConsumer({
    queue,
    consumerName,
    // Entries held while lanes consider them: not attempts (the gate caps those). Lanes waiting for a
    // permit hold theirs until their next record, and with the cap this low another organisation's
    // entries would wait unread behind them.
    concurrency: Math.max(concurrency, MIN_ENTRIES_HELD),
    batchSize: settings.claimBatchSize ?? 50,
    reclaimIdleMs: leaseMs,
    logger,
    async handle(entries) {
      await Promise.all(
        entries.flatMap(({ message }) =>
          message
            ? message.deliveryIds.map((deliveryId) =>
                lanes!.push({ deliveryId, endpointId: message.endpointId, lease: message.lease }),
              )
            : [],
        ),
      );
    },
  });
  let lanes: EndpointLanes | undefined;

  queue.onReset(() => {
    void scheduler
      .requeue()
      .catch((error: unknown) => logger.error({ err: error }, 'handing work out again after a queue reset failed'));
  });

  let state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  let stopped: Promise<void> | undefined;
  return {
    metrics,
    consumerName,
    notifyOutbox: () => relay.wake(),
    runRetention: () => retention.runOnce(),
    attemptsInFlight: (orgId) => permits.inFlight(orgId),
    async start() {
      if (state !== 'idle') return;
      const { sealed } = await prepareWebhookSecrets(db, deps.keyring);
      if (sealed > 0) logger.info({ sealed }, 'webhook signing secrets sealed under HERALD_ENCRYPTION_KEYS');
      await queue.init();
      await presence?.start();
      permits.start();
      deliverer = createDeliverer({
        timeoutMs: settings.timeoutMs,
        policy: { allowPrivateUrls: settings.allowPrivateUrls },
        connectionsPerEndpoint: endpointConcurrency,
      });
      attempter = createBatchAttempter({
        db,
        queue,
        deliverer,
        metrics,
        logger,
        retry: { baseMs: settings.retryBaseMs, horizonMs: settings.retryHorizonMs },
        secrets,
        attemptLeaseMs: leaseMs,
        endpointCap: endpointConcurrency,
        disableAfterMs: settings.disableAfterMs ?? DEFAULT_DISABLE_AFTER_MS,
        onOutboxEvents: () => relay.wake(),
        onStep: deps.onStep,
        random: deps.random,
      });
      lanes = createEndpointLanes({
        attempter,
        gate,
        rate,
        statements,
        running: () => state === 'running',
        endpointCap: endpointConcurrency,
        leaseMs,
        timeoutMs: settings.timeoutMs,
        logger,
      });
      state = 'running';
      consumer.start();
      scheduler.start();
      relay.start();
      retention.start();
      if (deps.databaseUrl) {
        listener = createOutboxListener({ databaseUrl: deps.databaseUrl, logger, onEvent: () => relay.wake() });
      } else {
        // Embedded (PGlite): the commit's notification arrives in this process.
        listener = await listenInProcess(db, () => relay.wake());
      }
      await listener?.start();
      logger.info({ queue: queue.kind, concurrency, endpointConcurrency }, 'webhook dispatcher started');
    },
    stop() {
      stopped ??= (async () => {
        if (state === 'idle') {
          state = 'stopped';
          return;
        }
        state = 'stopping';
        // A queue that cannot be reached now would hold the loops' stops (a pass's XADD, the blocked read)
        // for as long as its client keeps their commands, 10 to 60 s and more: they get STOP_WAIT_QUEUE_AWAY_MS.
        // What those commands carried is handed out again once it is back (work entries are hints).
        const queueAway = !(await answersWithin(() => queue.ping(), READINESS_PING_MS));
        if (queueAway) logger.warn('webhook queue unreachable while stopping: its commands in waiting are not awaited');
        await listener?.stop();
        const loops = Promise.all([relay.stop(), scheduler.stop(), retention.stop(), consumer.stop()]);
        await (queueAway ? answersWithin(() => loops, STOP_WAIT_QUEUE_AWAY_MS) : loops);
        // Lanes end once their POSTs in flight are recorded; those records settle (durable, dead letters
        // streamed) here.
        await lanes?.drain();
        // After the lanes: one held back by a rate limit winds down on its next wake-up.
        rate.stop();
        await permits.stop();
        await presence?.stop();
        await attempter?.drain();
        await deliverer?.close();
        secrets.clear();
        state = 'stopped';
        logger.info('webhook dispatcher stopped');
      })();
      return stopped;
    },
    async readiness() {
      if (state !== 'running') return notReady(state === 'idle' ? 'not started' : state);
      // The stores first, so that an outage is named by its cause for as long as it lasts (the loops'
      // passes fail because of it); each ping answers within READINESS_PING_MS or counts as down.
      const [queueUp, databaseUp] = await Promise.all([
        answersWithin(() => queue.ping(), READINESS_PING_MS),
        answersWithin(() => db.selectNoFrom((eb) => eb.lit(1).as('one')).execute(), READINESS_PING_MS),
      ]);
      if (!databaseUp) return notReady('database unreachable');
      if (!queueUp) return notReady('queue unreachable');
      return [relay.readiness(), scheduler.readiness()].find((answer) => !answer.ready) ?? READY;
    },
  };
}

/**
 * How long a readiness ping may take before its store counts as unreachable: under the 2 s after which
 * Kubernetes gives up on the probe (k8s/base), so a hung store gets a 503 with its reason, not a timeout.
 */
export const READINESS_PING_MS = 1_000;
/** How long a stop waits for its loops while the queue is unreachable (see `stop`). */
const STOP_WAIT_QUEUE_AWAY_MS = 2_000;

/** Whether `ping` resolves within `ms` (a rejection or no answer in time: false). */
function answersWithin(ping: () => Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    ping().then(
      () => {
        clearTimeout(timer);
        resolve(true);
      },
      () => {
        clearTimeout(timer);
        resolve(false);
      },
    );
  });
}

/**
 * Seconds since the oldest event not yet fanned out was recorded (the first row of the pending-fan-out
 * queue): 0 when none waits. `herald_webhook_outbox_lag_seconds`.
 */
export async function outboxLagSeconds(db: Kysely<Database>): Promise<number> {
  return countWhere(
    db,
    sql`select coalesce(extract(epoch from now() - (
          select created_at from webhook_outbox
          where seq = (select seq from webhook_outbox_pending order by seq limit 1)
        )), 0)::float8 as n`,
  );
}

async function countWhere(db: Kysely<Database>, query: ReturnType<typeof sql<{ n: number }>>): Promise<number> {
  const { rows } = await query.execute(db);
  return rows[0]?.n ?? 0;
}
