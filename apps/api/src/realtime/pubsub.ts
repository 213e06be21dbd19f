import { notReady, READY, type Readiness } from '@herald/config';
import { createRedisClient, isCluster, type RedisClient } from '@herald/config/redis';
import { DEFAULT_REDIS_PREFIX, newEventId, webhookRedisKeys } from '@herald/contracts';
import { type Database, handPostEventToRelay, type Post } from '@herald/db';
import { createOutboxWakePublisher, type OutboxWakePublisher } from '@herald/webhook-engine';
import type { Kysely } from 'kysely';
import type { Logger } from '../logger.js';
import type { ApiMetrics } from '../metrics.js';
import type { AppendOutcome, HistoryLimits, SubscriptionHistory } from './history.js';
import { createHistoryMarks, type HistoryMarks } from './history-marks.js';
import { createHistoryRelay, type HistoryRelay } from './history-relay.js';
import { createMemoryHistory } from './memory-history.js';
import { toPostPublishedEvent } from './post-event.js';
import { createRedisHistory } from './redis-history.js';
import { createReplayReads, type ReplayReads } from './replay-reads.js';

/** Defaults: events kept per organisation, and how long after its last event. */
export const DEFAULT_HISTORY_LIMITS: HistoryLimits = { size: 1_000, ttlMs: 3_600_000 };
/** `SUBSCRIPTION_REPLAY_CONCURRENCY` default: history reads for resuming subscriptions at a time, per pod. */
export const DEFAULT_REPLAY_CONCURRENCY = 4;
/** A history command that takes longer than this fails (the relay retries); Redis is local and fast. */
const REDIS_COMMAND_TIMEOUT_MS = 5_000;
/**
 * A mutation whose event was handed to the relay waits at most this long for the relay's pass, so a
 * client that publishes then reads sees its event live; a slow relay (lock held by another pod's long
 * pass) never holds the mutation longer.
 */
export const HANDOFF_WAIT_MAX_MS = 2_000;

export interface PubSubService {
  kind: 'memory' | 'redis';
  /** Each organisation's history and live channel. */
  history: SubscriptionHistory;
  /** The history reads of resuming subscriptions: bounded per pod and shared (replay-reads.ts). */
  replay: ReplayReads;
  /**
   * Puts a committed `post.published` outbox event into the history (and out live), called right
   * after the commit. Unless the publish statement handed it to the relay, the event is appended here,
   * at once, and marked `historied_at` later in a batch (with Redis; an in-process history's event was
   * marked by the publish statement, see {@link historyInProcess}); when that append fails (Redis unreachable) or
   * the service is closed, it is handed to the relay (`history_handed_at`), which appends it in outbox
   * order once it can, and later events of its organisation queue behind it.
   * @returns once the event is in the history; for a handed event, once the relay's pass finished or
   *   after {@link HANDOFF_WAIT_MAX_MS}. Never rejects: an event that could not be moved stays in the
   *   outbox and the relay retries it. When its fan-out is due, it also wakes the webhook dispatchers'
   *   relays first: with Redis a PUBLISH on the outbox wake-up channel, sent without waiting; otherwise
   *   the in-process dispatcher ({@link PubSubDeps.wakeWebhookDispatcher}).
   */
  published(publication: {
    post: Post;
    eventId: string;
    handedToRelay: boolean;
    fanOutDue: boolean;
    /** The publish statement recorded it `historied_at` already (see {@link historyInProcess}). */
    historied?: boolean;
    /** The publishing operation's `traceparent`, carried by the event to every pod's fan-out. */
    traceparent?: string | null;
  }): Promise<void>;
  /**
   * True when {@link published} wakes the webhook dispatchers itself for an event whose fan-out is due
   * (cluster mode through Redis, embedded and single mode in process): publishPost then sends no NOTIFY.
   */
  readonly wakesWebhookDispatchers: boolean;
  /**
   * True when the history lives in this process (no Redis): publishPost then asks its statement to
   * record the event `historied_at` itself (`PublishOptions.historyInProcess`), and {@link published}
   * writes no batched mark for an event that says so (`historied`).
   */
  readonly historyInProcess: boolean;
  /**
   * Appends one post's event directly (for callers without an outbox row: tests, the bench).
   * @returns the entry, or the error (Redis unreachable)
   */
  publishPostPublished(post: Post, eventId?: string): Promise<AppendOutcome>;
  /**
   * Resolves once Redis is ready (at once in memory) and starts the relay. A pod serves only after this.
   * @throws Error when Redis is not reachable within `timeoutMs`
   */
  ready(timeoutMs: number): Promise<void>;
  /**
   * False while a Redis connection is down (reconnecting), including, on Redis Cluster, the sharded
   * subscriber connection of a master that owns a channel this pod listens on (its live events would be
   * missed), with the reason `redis unreachable`; always ready in memory. For `/readiness` (503 during an
   * outage).
   */
  readiness(): Readiness;
  /** Stops the relay and closes the Redis connections. */
  close(): Promise<void>;
}

export interface PubSubDeps {
  /** Any `REDIS_URL` form: one endpoint, Sentinel or Cluster (`@herald/config`); undefined: in memory. */
  redisUrl: string | undefined;
  /** `HERALD_REDIS_PREFIX`. @default 'herald:' */
  redisPrefix?: string;
  /** `SUBSCRIPTION_HISTORY_SIZE` / `SUBSCRIPTION_HISTORY_TTL`. @default 1000 events, 1 h */
  limits?: HistoryLimits;
  /** `SUBSCRIPTION_REPLAY_CONCURRENCY`. @default {@link DEFAULT_REPLAY_CONCURRENCY} */
  replayConcurrency?: number;
  /** The outbox the history relay reads; without it, only `publishPostPublished` feeds the history. */
  db?: Kysely<Database>;
  /**
   * Wakes the webhook dispatcher running in this process (embedded and single mode, no Redis) after a
   * publish whose fan-out is due, instead of a NOTIFY: the NOTIFY would make PostgreSQL commit notifying
   * transactions one at a time, and on PGlite it is one more thing each publish statement carries.
   * Ignored with Redis (the dispatchers are other processes, woken through Redis). @default none
   */
  wakeWebhookDispatcher?: () => void;
  /** The relay's grace for events nobody appended or handed over. @default HISTORY_ORPHAN_AFTER_MS */
  orphanAfterMs?: number;
  logger: Logger;
  metrics: ApiMetrics;
}

/**
 * The live channels' connection. Subscriptions made during an outage wait for the reconnect instead of
 * failing. After a reconnect the history subscribes every feed again itself (redis-history.ts, on `ready`)
 * and handles a SUBSCRIBE the server refuses; ioredis's own re-subscribe would leave such a refusal as an
 * unhandled rejection, which ends the process.
 */
export const SUBSCRIBER_OPTIONS = { maxRetriesPerRequest: null, autoResubscribe: false } as const;

/**
 * Realtime events of `post-published`: the history (Redis, or in process without `REDIS_URL`), the
 * live channel every pod listens on, and the relay that feeds both from the durable outbox.
 *
 * Redis outages: commands fail fast (no offline queue), so the relay keeps the events in the outbox
 * and retries; the subscriber connection reconnects, the history subscribes its feeds again, and each
 * live feed reads the events it missed from the history, so subscribers see every event once, in order.
 */
export function createPubSubService(deps: PubSubDeps): PubSubService {
  const { logger, metrics } = deps;
  const limits = deps.limits ?? DEFAULT_HISTORY_LIMITS;
  let connections: RedisClient[] = [];
  let subscriberClient: RedisClient | undefined;
  let history: SubscriptionHistory;
  let outboxWake: OutboxWakePublisher | undefined;
  if (!deps.redisUrl) {
    history = createMemoryHistory(limits);
  } else {
    const commands = createRedisClient(deps.redisUrl, {
      lazyConnect: false,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
      connectionName: 'herald-api-publish',
    });
    // Replays read on their own connection: a resume storm's replies never queue the appends.
    const reader = createRedisClient(deps.redisUrl, {
      lazyConnect: false,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
      connectionName: 'herald-api-replay',
    });
    const subscriber = createRedisClient(
      deps.redisUrl,
      { ...SUBSCRIBER_OPTIONS, connectionName: 'herald-api-subscribe' },
      // Redis Cluster: one SSUBSCRIBE connection per master (sharded pub/sub, see redis-history.ts).
      { shardedSubscribers: true },
    );
    connections = [commands, reader, subscriber];
    outboxWake = createOutboxWakePublisher(
      commands,
      webhookRedisKeys(deps.redisPrefix ?? DEFAULT_REDIS_PREFIX).outboxWakeChannel,
      // The dispatchers' relays poll the outbox anyway: a lost wake-up only delays a fan-out.
      (error) => logger.debug({ err: error }, 'waking the webhook dispatchers failed'),
    );
    subscriberClient = subscriber;
    for (const [name, client] of [
      ['publish', commands],
      ['replay', reader],
      ['subscribe', subscriber],
    ] as const) {
      client.on('error', (error: Error) => logger.warn({ err: error, connection: name }, 'redis connection error'));
      client.on('ready', () => logger.info({ connection: name }, 'redis connection ready'));
    }
    // Redis Cluster: ioredis (re)creates one SSUBSCRIBE connection per master after a topology change or a
    // dropped shard connection, then emits this; the feeds re-subscribe and fill (redis-history.ts).
    subscriber.on('subscribersReady', () =>
      logger.info({ down: downShardSubscribers(subscriber) }, 'redis shard subscribers (re)created'),
    );
    history = createRedisHistory({
      commands,
      reader,
      subscriber,
      prefix: deps.redisPrefix ?? DEFAULT_REDIS_PREFIX,
      limits,
      logger,
    });
  }
  const replay = createReplayReads(history, {
    concurrency: deps.replayConcurrency ?? DEFAULT_REPLAY_CONCURRENCY,
    logger,
  });
  const relay: HistoryRelay | undefined = deps.db
    ? createHistoryRelay({ db: deps.db, history, logger, metrics, orphanAfterMs: deps.orphanAfterMs })
    : undefined;
  // Events their publish statement marked already (`historied`) get no batched mark.
  const marks: HistoryMarks | undefined = deps.db ? createHistoryMarks({ db: deps.db, logger }) : undefined;
  const redisWake = outboxWake;
  const wakeDispatchers: (() => void) | undefined = redisWake
    ? () => redisWake.wake()
    : deps.redisUrl
      ? undefined
      : deps.wakeWebhookDispatcher;
  let closed = false;
  let appendFailing = false;

  async function waitForRelay() {
    if (!relay) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      relay.wake(),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, HANDOFF_WAIT_MAX_MS);
      }),
    ]);
    clearTimeout(timer);
  }

  /**
   * Waits at most {@link HANDOFF_WAIT_MAX_MS} (a slow Redis): an append still in flight then may land
   * later, and the relay's append of the handed event and it are deduplicated by event id.
   * @returns true when the event is in the history now
   */
  async function appendDirectly(
    post: Post,
    eventId: string,
    historied: boolean,
    traceparent: string | null | undefined,
  ): Promise<boolean> {
    let outcome: AppendOutcome | undefined;
    let timer: NodeJS.Timeout | undefined;
    try {
      const appending = history.append([toPostPublishedEvent(post, eventId, traceparent)]);
      // In process the append is done by now; only Redis can answer late.
      [outcome] = await (!deps.redisUrl
        ? appending
        : Promise.race([
            appending,
            new Promise<AppendOutcome[]>((resolve) => {
              timer = setTimeout(
                () => resolve([{ ok: false, error: new Error(`history append took over ${HANDOFF_WAIT_MAX_MS} ms`) }]),
                HANDOFF_WAIT_MAX_MS,
              );
            }),
          ]));
    } catch (error) {
      outcome = { ok: false, error: error instanceof Error ? error : new Error(String(error)) };
    }
    clearTimeout(timer);
    if (outcome?.ok) {
      appendFailing = false;
      metrics.eventsPublished.inc();
      if (!historied) marks?.add(eventId);
      return true;
    }
    metrics.deliveryErrors.inc({ reason: 'publish_failed' });
    if (!appendFailing)
      logger.warn({ err: outcome?.error, eventId }, 'history: direct append failed, handing the event to the relay');
    appendFailing = true;
    return false;
  }

  return {
    kind: deps.redisUrl ? 'redis' : 'memory',
    history,
    replay,
    wakesWebhookDispatchers: wakeDispatchers !== undefined,
    historyInProcess: !deps.redisUrl,
    async published({ post, eventId, handedToRelay, fanOutDue, historied = false, traceparent }) {
      if (fanOutDue) wakeDispatchers?.();
      if (!deps.db) return;
      if (!handedToRelay) {
        if (!closed && (await appendDirectly(post, eventId, historied, traceparent))) return;
        // Handed over before answering: from now on the organisation's publishes queue behind it.
        try {
          await handPostEventToRelay(deps.db, eventId, { markedByPublish: historied });
        } catch (error) {
          // Database unreachable too: the relay still takes the event after its grace (not ordered),
          // unless its publish statement marked it (in-process history): then it stays out of the history.
          logger.warn({ err: error, eventId }, 'history: could not hand the event to the relay');
        }
      }
      if (!closed) await waitForRelay();
    },
    async publishPostPublished(post, eventId = newEventId()) {
      const [outcome] = await history.append([toPostPublishedEvent(post, eventId)]);
      if (!outcome) throw new Error('unreachable: one outcome per event');
      if (outcome.ok) metrics.eventsPublished.inc();
      else metrics.deliveryErrors.inc({ reason: 'publish_failed' });
      return outcome;
    },
    async ready(timeoutMs) {
      await Promise.all(connections.map((client) => untilReady(client, timeoutMs)));
      relay?.start();
    },
    readiness() {
      // Both Redis connections up: a pod whose subscriber is reconnecting would miss live events. A
      // relay that can't reach the database is not counted here: `/readiness` pings the database itself
      // and names that cause (events wait in the outbox meanwhile).
      const up =
        connections.every((client) => client.status === 'ready') && downShardSubscribers(subscriberClient).length === 0;
      return up ? READY : notReady('redis unreachable');
    },
    async close() {
      closed = true;
      await marks?.stop();
      await relay?.stop();
      await history.close();
      // QUIT lets pending replies arrive; a connection that never came up is just dropped.
      await Promise.allSettled(
        connections.map((client) => (client.status === 'ready' ? client.quit() : client.disconnect())),
      );
      for (const client of connections) client.disconnect();
    },
  };
}

/**
 * The parts of ioredis 5's `ClusterSubscriberGroup` (`cluster.shardedSubscribers`) that tell whether each
 * master owning a subscribed shard channel has a live SSUBSCRIBE connection. ioredis exposes no status for
 * them: the Cluster stays `ready` while one shard subscriber is down. pubsub-topologies.test.ts pins this
 * (readiness says `redis unreachable` while a master is down), so an ioredis upgrade that moves these fails there.
 */
interface ShardedSubscriberGroupView {
  /** Per slot: `[masterNodeKey, …replicas]`. */
  clusterSlots: string[][];
  /** Per slot: the shard channels subscribed (empty after the last SUNSUBSCRIBE). */
  channels: Map<number, string[]>;
  /** Per master node key. */
  shardedSubscribers: Map<string, { getInstance(): { status: string } | null }>;
}

/**
 * Node keys (`host:port`) of the masters that own a shard channel this client subscribed to but whose
 * subscriber connection is not ready (down, reconnecting, or not yet created after a topology change).
 * Empty outside Redis Cluster.
 */
export function downShardSubscribers(client: RedisClient | undefined): string[] {
  if (!client || !isCluster(client)) return [];
  const group = (client as unknown as { shardedSubscribers?: Partial<ShardedSubscriberGroupView> }).shardedSubscribers;
  if (!group?.channels || !group.clusterSlots || !group.shardedSubscribers) return [];
  const down = new Set<string>();
  for (const [slot, channels] of group.channels) {
    if (channels.length === 0) continue;
    const owner = group.clusterSlots[slot]?.[0];
    if (!owner) down.add(`slot ${slot}`);
    else if (group.shardedSubscribers.get(owner)?.getInstance()?.status !== 'ready') down.add(owner);
  }
  return [...down];
}

function untilReady(client: RedisClient, timeoutMs: number): Promise<void> {
  if (client.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      client.off('ready', onReady);
      reject(new Error(`Redis not reachable within ${timeoutMs} ms (REDIS_URL)`));
    }, timeoutMs);
    const onReady = () => {
      clearTimeout(timer);
      resolve();
    };
    client.once('ready', onReady);
  });
}
