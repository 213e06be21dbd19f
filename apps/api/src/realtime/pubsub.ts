import { createRedisEventTarget } from '@graphql-yoga/redis-event-target';
import { createRedisClient, isCluster, type RedisClient } from '@herald/config/redis';
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
}

export interface PubSubDeps {
  /** Any `REDIS_URL` form: one endpoint, Sentinel or Cluster (`@herald/config`). */
  redisUrl: string | undefined;
  logger: Logger;
  metrics: ApiMetrics;
}

/**
 * Yoga's in-memory pub/sub (one process), or with `REDIS_URL` the Redis event target over two ioredis
 * clients so every pod sees every event. Behind a Sentinel URL both clients follow the master across
 * failovers; on Redis Cluster organisation channels use sharded pub/sub (SPUBLISH/SSUBSCRIBE), served
 * by the shard owning the channel's slot, and ioredis moves the subscriptions when slots move.
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
    };
  }

  const publisher = createRedisClient(deps.redisUrl, {
    lazyConnect: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    connectionName: 'herald-api-publish',
  });
  const subscriber = createRedisClient(
    deps.redisUrl,
    {
      // Subscriptions made during an outage wait for the reconnect instead of failing.
      maxRetriesPerRequest: null,
      autoResubscribe: true,
      connectionName: 'herald-api-subscribe',
    },
    { shardedSubscribers: true },
  );
  // Redis Cluster: sharded pub/sub (SPUBLISH/SSUBSCRIBE, Redis ≥ 7). A channel lives on the shard that
  // owns its slot, so an organisation's events cross one shard instead of being broadcast over the
  // cluster bus to every node; organisations spread over the shards by their channel's slot.
  const sharded = isCluster(subscriber);
  for (const [name, client] of [
    ['publish', publisher],
    ['subscribe', subscriber],
  ] as const) {
    client.on('error', (error: Error) => logger.warn({ err: error, connection: name }, 'redis connection error'));
    client.on('ready', () => logger.info({ connection: name }, 'redis connection ready'));
  }

  // The event target fires publish/subscribe without awaiting them; catch here so a failed command is
  // logged and counted instead of becoming an unhandled rejection.
  const publishClient = {
    publish: (channel: string, message: string) =>
      (sharded ? publisher.spublish(channel, message) : publisher.publish(channel, message)).catch((error: Error) => {
        metrics.deliveryErrors.inc({ reason: 'publish_failed' });
        logger.error({ err: error, channel }, 'event not published: redis unavailable (not replayed)');
        return 0;
      }),
  };
  const subscribeClient = {
    // The event target listens for `message`; sharded channels deliver `smessage` (same arguments).
    on: (event: string, listener: (...args: any[]) => void) =>
      subscriber.on(sharded && event === 'message' ? 'smessage' : event, listener),
    subscribe: (channel: string) =>
      (sharded ? subscriber.ssubscribe(channel) : subscriber.subscribe(channel)).catch((error: Error) =>
        logger.error({ err: error, channel }, 'redis subscribe failed'),
      ),
    unsubscribe: (channel: string) =>
      (sharded ? subscriber.sunsubscribe(channel) : subscriber.unsubscribe(channel)).catch((error: Error) =>
        logger.warn({ err: error, channel }, 'redis unsubscribe failed'),
      ),
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
