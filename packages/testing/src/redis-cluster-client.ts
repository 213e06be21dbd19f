/**
 * A Redis Cluster of the test's own with a Herald client already connected to it, for tests that run
 * Redis scripts on a real cluster. A separate entry point (`@herald/testing/redis-cluster-client`), so
 * that importing `@herald/testing` does not load ioredis.
 */
import { createRedisClient, type RedisClient } from '@herald/config/redis';
import { type RedisClusterSetup, startRedisCluster } from './redis-topologies.js';

/** Upper bound on the client becoming ready once the cluster is up. */
const READY_TIMEOUT_MS = 15_000;

export interface RedisClusterWithClient extends RedisClusterSetup {
  /** A client to the cluster, made as the API and the dispatcher make theirs from REDIS_URL. */
  redis: RedisClient;
  /** Disconnects {@link redis} and stops the cluster. */
  stop(): Promise<void>;
}

/**
 * Starts a 3-master cluster ({@link startRedisCluster}) and resolves once a client to it is ready. A
 * client that is not ready yet is not connected to the cluster (a rate limiter, say, answers locally
 * then, as in a pod that is starting), so a test must not begin before this resolves.
 */
export async function startRedisClusterWithClient(): Promise<RedisClusterWithClient> {
  const cluster = await startRedisCluster();
  const redis = createRedisClient(cluster.url, { enableOfflineQueue: true });
  const stop = async () => {
    redis.disconnect();
    await cluster.stop();
  };
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`the Redis Cluster client was not ready within ${READY_TIMEOUT_MS} ms`)),
        READY_TIMEOUT_MS,
      );
      redis.once('ready', () => {
        clearTimeout(timer);
        resolve();
      });
    });
  } catch (error) {
    await stop();
    throw error;
  }
  return { ...cluster, redis, stop };
}
