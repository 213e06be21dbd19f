import { createRedisEventTarget } from '@graphql-yoga/redis-event-target';
import { createRedisClient, type RedisClient } from '@herald/config/redis';
import { DEFAULT_REDIS_PREFIX, redisChannel } from '@herald/contracts';
import type { Post } from '@herald/db';
import { createPubSub } from 'graphql-yoga';
import type { Redis } from 'ioredis';
import type { Logger } from '../logger.js';
import type { ApiMetrics } from '../metrics.js';

/** Topic of `post-published:<orgId>` (Yoga's pub/sub appends `:<id>`: see @herald/contracts). */
export const POST_PUBLISHED_TOPIC = 'post-published';

/**
 * What travels on `post-published:<orgId>`: the post row as JSON (dates as ISO strings), plus when it
 * was published to pub/sub, for the event-to-send latency metric.
 */
export type PostPublishedEvent = Omit<Post, 'created_at' | 'published_at' | 'seq'> & {
  created_at: string;
  published_at: string | null;
  seq: string;
  emitted_at: number;
};

export type HeraldPubSub = ReturnType<typeof createTypedPubSub>;

function createTypedPubSub(eventTarget?: ReturnType<typeof createRedisEventTarget>) {
  return createPubSub<{ [POST_PUBLISHED_TOPIC]: [orgId: string, event: PostPublishedEvent] }>(
    eventTarget ? { eventTarget } : undefined,
  );
}

export interface PubSubService {
  pubsub: HeraldPubSub;
  kind: 'memory' | 'redis';
  /** Announces a published post to its organisation's subscribers on every pod. Never throws. */
  publishPostPublished(post: Post): void;
  /**
   * Resolves once both Redis connections are ready (at once in memory). A pod starts serving only
   * after this, so its first events are not dropped.
   * @throws Error when Redis is not reachable within `timeoutMs`
   */
  ready(timeoutMs: number): Promise<void>;
  /** Closes the Redis connections (no-op in memory). */
  close(): Promise<void>;
  /** False while either Redis connection is down (reconnecting); always true in memory. For `/readiness`. */
  readonly readiness: boolean;
}

export interface PubSubDeps {
  /** Any `REDIS_URL` form: one endpoint, Sentinel or Cluster (`@herald/config`). */
  redisUrl: string | undefined;
  /** `HERALD_REDIS_PREFIX`, in front of every channel. @default 'herald:' */
  redisPrefix?: string;
  logger: Logger;
  metrics: ApiMetrics;
}

/**
 * Yoga's in-memory pub/sub (one process), or with `REDIS_URL` the Redis event target over two ioredis
 * clients so every pod sees every event. Behind a Sentinel URL both clients follow the master across
 * failovers; on Redis Cluster, PUBLISH reaches every node, so any node serves the subscriber.
 *
 * Redis outages: the subscriber connection reconnects by itself and ioredis re-subscribes its channels
 * (`autoResubscribe`), so later events arrive again. Events published while Redis is unreachable fail
 * fast (no offline queue on the publisher) and are logged and counted: Redis pub/sub has no replay, and
 * clients reconcile with a `posts` query after reconnecting (see README).
 */
export function createPubSubService(deps: PubSubDeps): PubSubService {
  const { logger, metrics } = deps;
  if (!deps.redisUrl) {
    const pubsub = createTypedPubSub();
    return {
      pubsub,
      kind: 'memory',
      publishPostPublished: (post) => publish(pubsub, post, metrics),
      ready: async () => {},
      close: async () => {},
      readiness: true,
    };
  }

  const onError = (connection: string) => (error: Error) =>
    logger.warn({ err: error, connection }, 'redis connection error');
  const publisher = createRedisClient(
    deps.redisUrl,
    { lazyConnect: false, enableOfflineQueue: false, maxRetriesPerRequest: 1, connectionName: 'herald-api-publish' },
    { onError: onError('publish') },
  );
  const subscriber = createRedisClient(
    deps.redisUrl,
    // Subscriptions made during an outage wait for the reconnect instead of failing.
    { maxRetriesPerRequest: null, autoResubscribe: true, connectionName: 'herald-api-subscribe' },
    { onError: onError('subscribe') },
  );
  for (const [name, client] of [
    ['publish', publisher],
    ['subscribe', subscriber],
  ] as const) {
    client.on('ready', () => logger.info({ connection: name }, 'redis connection ready'));
  }

  // The event target fires publish/subscribe without awaiting them; catch here so a failed command is
  // logged and counted instead of becoming an unhandled rejection. Its topics travel on Redis with the
  // installation's prefix, added and removed here only.
  const prefix = deps.redisPrefix ?? DEFAULT_REDIS_PREFIX;
  const onRedis = (topic: string) => redisChannel(prefix, topic);
  const publishClient = {
    publish: (topic: string, message: string) =>
      publisher.publish(onRedis(topic), message).catch((error: Error) => {
        metrics.deliveryErrors.inc({ reason: 'publish_failed' });
        logger.error({ err: error, channel: onRedis(topic) }, 'event not published: redis unavailable (not replayed)');
        return 0;
      }),
  };
  const subscribeClient = {
    on: (event: 'message', listener: (topic: string, message: string) => void) =>
      subscriber.on(event, (channel: string, message: string) => {
        if (channel.startsWith(prefix)) listener(channel.slice(prefix.length), message);
      }),
    subscribe: (topic: string) =>
      subscriber
        .subscribe(onRedis(topic))
        .catch((error: Error) => logger.error({ err: error, channel: onRedis(topic) }, 'redis subscribe failed')),
    unsubscribe: (topic: string) =>
      subscriber
        .unsubscribe(onRedis(topic))
        .catch((error: Error) => logger.warn({ err: error, channel: onRedis(topic) }, 'redis unsubscribe failed')),
  };
  const pubsub = createTypedPubSub(
    createRedisEventTarget({
      publishClient: publishClient as unknown as Redis,
      subscribeClient: subscribeClient as unknown as Redis,
    }),
  );
  return {
    pubsub,
    kind: 'redis',
    publishPostPublished: (post) => publish(pubsub, post, metrics),
    async ready(timeoutMs) {
      await Promise.all([untilReady(publisher, timeoutMs), untilReady(subscriber, timeoutMs)]);
    },
    async close() {
      // QUIT lets pending replies arrive; a connection that never came up is just dropped.
      await Promise.allSettled(
        [publisher, subscriber].map((client) => (client.status === 'ready' ? client.quit() : client.disconnect())),
      );
      publisher.disconnect();
      subscriber.disconnect();
    },
    get readiness() {
      return publisher.status === 'ready' && subscriber.status === 'ready';
    },
  };
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

function publish(pubsub: HeraldPubSub, post: Post, metrics: ApiMetrics): void {
  metrics.eventsPublished.inc();
  pubsub.publish(POST_PUBLISHED_TOPIC, post.org_id, toPostPublishedEvent(post));
}

/** The JSON-safe event for a post (bigint and Date become strings). */
export function toPostPublishedEvent(post: Post): PostPublishedEvent {
  return {
    ...post,
    seq: String(post.seq),
    created_at: toIso(post.created_at),
    published_at: post.published_at == null ? null : toIso(post.published_at),
    emitted_at: Date.now(),
  };
}

function toIso(value: Date | string): string {
  return value instanceof Date ? value.toISOString() : new Date(value).toISOString();
}
