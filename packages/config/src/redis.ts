/**
 * `createRedisClient`: one ioredis client for any `REDIS_URL` form (see `redis-url.ts`). A separate entry
 * point (`@herald/config/redis`) so that reading the environment never loads ioredis.
 */
import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import { InvalidRedisUrlError, parseRedisUrl } from './redis-url.js';

/** What {@link createRedisClient} returns: both speak the same commands, events and `quit`/`disconnect`. */
export type RedisClient = Redis | Cluster;

/** How {@link createRedisClient} builds the client; exported so the mapping is testable without a server. */
export type RedisClientConfig =
  | { kind: 'standalone'; url: string; options: RedisOptions }
  | { kind: 'sentinel'; options: RedisOptions }
  | { kind: 'cluster'; nodes: Array<{ host: string; port: number }>; options: ClusterOptions };

/**
 * Options that belong to the `Cluster` itself rather than to its per-node connections. Everything else
 * the caller passes goes to every node (`redisOptions`); the caller's `retryStrategy` becomes the
 * cluster's reconnect strategy.
 */
const CLUSTER_LEVEL_OPTIONS = [
  'enableOfflineQueue',
  'enableReadyCheck',
  'lazyConnect',
  'enableAutoPipelining',
  'autoPipeliningIgnoredCommands',
  'keyPrefix',
  'showFriendlyErrorStack',
  'scripts',
] as const satisfies ReadonlyArray<keyof RedisOptions & keyof ClusterOptions>;
/** Connection targets come from the URL only; `ClusterOptions.redisOptions` refuses these. */
const TARGET_OPTIONS = ['host', 'port', 'path', 'sentinels', 'readOnly'] as const;

/**
 * The ioredis constructor arguments for `url` with the caller's `options` (`enableOfflineQueue`,
 * `maxRetriesPerRequest`, `connectionName`, …). The URL decides where to connect and with which
 * credentials; the options decide how the client behaves.
 * @throws InvalidRedisUrlError naming REDIS_URL
 */
export function redisClientConfig(url: string, options: RedisOptions = {}): RedisClientConfig {
  let target: ReturnType<typeof parseRedisUrl>;
  try {
    target = parseRedisUrl(url);
  } catch (error) {
    if (error instanceof InvalidRedisUrlError) throw new InvalidRedisUrlError(`REDIS_URL: ${error.message}`);
    throw error;
  }
  switch (target.kind) {
    case 'standalone':
      // Exactly what the apps did before this factory existed.
      return { kind: 'standalone', url: target.url, options };
    case 'sentinel':
      return {
        kind: 'sentinel',
        options: {
          ...options,
          sentinels: target.sentinels,
          name: target.name,
          db: target.db,
          ...defined({
            username: target.username,
            password: target.password,
            sentinelUsername: target.sentinelUsername,
            sentinelPassword: target.sentinelPassword,
          }),
          // rediss+sentinel: TLS to the sentinels and to the data nodes they name.
          ...(target.tls ? { tls: {}, sentinelTLS: {}, enableTLSForSentinelMode: true } : {}),
        },
      };
    case 'cluster': {
      const clusterLevel: Record<string, unknown> = {};
      const nodeLevel: Record<string, unknown> = { ...options };
      for (const key of [...CLUSTER_LEVEL_OPTIONS, ...TARGET_OPTIONS, 'retryStrategy'] as const) {
        if (key in nodeLevel) {
          if ((CLUSTER_LEVEL_OPTIONS as readonly string[]).includes(key)) clusterLevel[key] = nodeLevel[key];
          delete nodeLevel[key];
        }
      }
      return {
        kind: 'cluster',
        nodes: target.nodes,
        options: {
          ...(clusterLevel as ClusterOptions),
          ...(options.retryStrategy === undefined ? {} : { clusterRetryStrategy: options.retryStrategy }),
          redisOptions: {
            ...(nodeLevel as ClusterOptions['redisOptions']),
            ...defined({ username: target.username, password: target.password }),
            ...(target.tls ? { tls: {} } : {}),
          },
          // rediss+cluster: connect to the nodes by the names the cluster announces, so certificates
          // issued for those names verify (ioredis's advice for ElastiCache with TLS).
          ...(target.tls
            ? {
                dnsLookup: (address: string, callback: (error: null, address: string) => void) =>
                  callback(null, address),
              }
            : {}),
        },
      };
    }
  }
}

/**
 * An ioredis client for `REDIS_URL`: `Redis` for `redis://`/`rediss://` (unchanged) and
 * `redis+sentinel://`, `Cluster` for `redis+cluster://`. `options` are the caller's ioredis options; for a
 * cluster, the node-level ones apply to every node (see {@link redisClientConfig}).
 *
 * The client always has an `'error'` listener: ioredis emits some errors (a cluster subscriber that
 * cannot connect, a protocol desync) with a plain `emit('error')`, which throws and ends the process
 * when nobody listens. It writes one line to stderr only while the caller has added no listener of
 * its own (add one to log through your logger); either way the client keeps reconnecting.
 * @throws InvalidRedisUrlError naming REDIS_URL when the URL is not one of the accepted forms
 */
export function createRedisClient(
  url: string,
  options: RedisOptions = {},
  clusterOptions: ClusterOnlyOptions = {},
): RedisClient {
  const client = newClient(redisClientConfig(url, options), clusterOptions);
  client.on('error', (error: Error) => {
    if (client.listenerCount('error') === 1) logRedisError(error);
  });
  return client;
}

function newClient(config: RedisClientConfig, clusterOptions: ClusterOnlyOptions): RedisClient {
  switch (config.kind) {
    case 'standalone':
      return new Redis(config.url, config.options);
    case 'sentinel':
      return new Redis(config.options);
    case 'cluster':
      return new Cluster(config.nodes, { ...config.options, ...clusterOptions });
  }
}

function logRedisError(error: Error): void {
  process.stderr.write(`herald: redis connection error (reconnecting): ${error.message}\n`);
}

/** Options only a Redis Cluster client has, applied when `REDIS_URL` names a cluster (ignored otherwise). */
export interface ClusterOnlyOptions {
  /**
   * One subscriber connection per master for `SSUBSCRIBE` (sharded pub/sub, Redis ≥ 7), so each channel is
   * served by the shard owning its slot instead of every message being broadcast to every node.
   * @default false
   */
  shardedSubscribers?: boolean;
}

/** True when `client` talks to a Redis Cluster (`redis+cluster://`). */
export function isCluster(client: RedisClient): client is Cluster {
  return client instanceof Cluster;
}

function defined<T extends Record<string, unknown>>(record: T): Partial<T> {
  return Object.fromEntries(Object.entries(record).filter(([, value]) => value !== undefined)) as Partial<T>;
}
