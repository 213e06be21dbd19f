import { randomUUID } from 'node:crypto';
import { createRedisClient, type RedisClient } from '@herald/config/redis';
import { newEventId, type WebhookRedisKeys, webhookRedisKeys } from '@herald/contracts';
import {
  createDatabase,
  type Database,
  type HeraldDatabase,
  insertOutboxEvent,
  insertWebhookEndpoint,
  migrateToLatest,
  type SecretKeyring,
} from '@herald/db';
import { createTestSchema, TEST_KEYRING, type TestSchema } from '@herald/testing';
import { generateWebhookSecret } from '@herald/webhooks';
import type { Kysely } from 'kysely';
import { pino } from 'pino';
import { createDispatcher, type Dispatcher, type DispatcherSettings } from '../dispatcher.js';
import { createRedisStreamQueue } from '../queue/redis-stream-queue.js';
import type { WebhookQueue } from '../queue/webhook-queue.js';

/** Millisecond-scale timings so retries, dead letters and reclaims happen within a test. */
export const FAST_SETTINGS: DispatcherSettings = {
  timeoutMs: 1_000,
  retryBaseMs: 30,
  retryHorizonMs: 4_000,
  allowPrivateUrls: true,
  pollIntervalMs: 25,
};

export interface StartedDispatcher extends Dispatcher {
  queue: WebhookQueue;
}

/** One test file's world: its own PostgreSQL schema and its own Redis key prefix. */
export interface DispatcherHarness {
  db: Kysely<Database>;
  database: HeraldDatabase;
  schema: TestSchema;
  redisUrl: string;
  /** Unique per harness, so parallel files and runs never share a stream. */
  redisPrefix: string;
  keys: WebhookRedisKeys;
  /** A plain Redis client for poking at the streams. */
  redis: RedisClient;
  /** A Redis-stream queue on this harness's keys (closed by `close`). */
  newQueue(): WebhookQueue;
  /**
   * Starts a dispatcher on this harness's database and keys (stopped by `close`). Its throttles share
   * Redis through a client of their own on `throttlesRedisUrl` (default the harness's Redis; a cuttable
   * proxy's URL to take Redis away from it alone; null: none, every throttle in this process only).
   */
  startDispatcher(
    settings?: Partial<DispatcherSettings>,
    keyring?: SecretKeyring,
    options?: { throttlesRedisUrl?: string | null; consumerName?: string },
  ): Promise<StartedDispatcher>;
  createEndpoint(orgId: string, url: string): Promise<{ id: string; secret: string }>;
  /**
   * A database of its own on this harness's schema with one connection (closed by `close`): its session
   * settings hold, and its statistics can be flushed on demand (`pg_stat_force_next_flush`) before a reading.
   */
  openSingleConnection(): Promise<HeraldDatabase>;
  /** Writes `count` post.published events for `orgId` to the outbox, as publishPost does. */
  publish(orgId: string, count?: number): Promise<string[]>;
  /** Stops every dispatcher started so far (a test's own settings then hold alone). */
  stopDispatchers(): Promise<void>;
  close(): Promise<void>;
}

/**
 * @param schema a schema to work in; by default a fresh test schema (which needs a running vitest:
 *   scripts outside tests, like the benchmark, bring their own)
 */
export async function createDispatcherHarness(
  databaseUrl: string,
  redisUrl: string,
  schema?: TestSchema,
): Promise<DispatcherHarness> {
  schema ??= await createTestSchema(databaseUrl);
  const database = await createDatabase({ kind: 'postgres', url: schema.url, poolMax: 20 });
  await migrateToLatest(database.db);
  const redisPrefix = `herald-test:${randomUUID()}:`;
  const keys = webhookRedisKeys(redisPrefix);
  const redis = createRedisClient(redisUrl);
  const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });
  const queues: WebhookQueue[] = [];
  const dispatchers: Dispatcher[] = [];
  const throttleClients: RedisClient[] = [];
  const singles: HeraldDatabase[] = [];
  const stopDispatchers = async () => {
    await Promise.all(dispatchers.map((dispatcher) => dispatcher.stop()));
  };
  const newQueue = () => {
    const queue = createRedisStreamQueue({ redisUrl, keys, logger });
    queues.push(queue);
    return queue;
  };

  return {
    db: database.db,
    database,
    schema,
    redisUrl,
    redisPrefix,
    keys,
    redis,
    newQueue,
    async startDispatcher(settings = {}, keyring = TEST_KEYRING, options = {}) {
      const queue = newQueue();
      const throttlesRedisUrl = options.throttlesRedisUrl === undefined ? redisUrl : options.throttlesRedisUrl;
      let throttles: { redis: RedisClient; keys: WebhookRedisKeys } | undefined;
      if (throttlesRedisUrl !== null) {
        const client = createRedisClient(throttlesRedisUrl, { enableOfflineQueue: false });
        throttleClients.push(client);
        // Tests cut this client's Redis on purpose: its reconnect errors are expected, not news.
        client.on('error', () => {});
        await waitUntilReady(client);
        throttles = { redis: client, keys };
      }
      const dispatcher = createDispatcher({
        throttles,
        consumerName: options.consumerName,
        db: database.db,
        databaseUrl: schema.url,
        queue,
        logger,
        keyring,
        settings: { ...FAST_SETTINGS, ...settings },
      });
      dispatchers.push(dispatcher);
      await dispatcher.start();
      return Object.assign(dispatcher, { queue });
    },
    async createEndpoint(orgId, url) {
      const secret = generateWebhookSecret();
      const endpoint = await insertWebhookEndpoint(database.db, {
        orgId,
        url,
        eventTypes: ['post.published'],
        secret,
        keyring: TEST_KEYRING,
      });
      return { id: endpoint.id, secret };
    },
    async publish(orgId, count = 1) {
      const ids: string[] = [];
      for (let i = 0; i < count; i++) {
        const id = newEventId();
        const created = new Date();
        const body = JSON.stringify({
          id,
          type: 'post.published',
          created: created.toISOString(),
          data: {
            id: randomUUID(),
            orgId,
            title: `post ${i}`,
            tags: [],
            status: 'PUBLISHED',
            publishedAt: created.toISOString(),
            author: { id: 'u', name: 'U' },
          },
        });
        await insertOutboxEvent(database.db, { id, orgId, type: 'post.published', body, createdAt: created });
        ids.push(id);
      }
      return ids;
    },
    async openSingleConnection() {
      const single = await createDatabase({ kind: 'postgres', url: schema.url, poolMax: 1 });
      singles.push(single);
      return single;
    },
    stopDispatchers,
    async close() {
      await stopDispatchers();
      await Promise.all(singles.map((single) => single.close()));
      await Promise.all(queues.map((queue) => queue.close()));
      for (const client of throttleClients) client.disconnect();
      // One key per DEL: on Redis Cluster the two streams may live on different nodes.
      await Promise.all([redis.del(keys.workStream), redis.del(keys.deadLetterStream), redis.del(keys.parkedStream)]);
      await redis.quit();
      await database.close();
      await schema.drop();
    },
  };
}

/** Resolves once `client` is connected (commands fail at once otherwise: the offline queue is off). */
async function waitUntilReady(client: RedisClient): Promise<void> {
  if (client.status === 'ready') return;
  await new Promise<void>((resolve) => client.once('ready', () => resolve()));
}
