import { randomUUID } from 'node:crypto';
import type { RedisClient } from '@herald/config/redis';
import { waitFor } from '@herald/testing/ports';
import { type RedisClusterWithClient, startRedisClusterWithClient } from '@herald/testing/redis-cluster-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createConcurrencyQuota } from './concurrency-quota.js';
import { createRateQuota } from './rate-quota.js';

// The quota limiters on a real Redis Cluster (three masters): every command names one key, so each runs
// on its key's shard; a Redis error here fails the test instead of falling back to the local share.

let cluster: RedisClusterWithClient;
let redis: RedisClient;
const failOnRedisError = (error: unknown) => {
  throw error;
};

beforeAll(async () => {
  cluster = await startRedisClusterWithClient();
  redis = cluster.redis;
}, 40_000);

afterAll(() => cluster?.stop());

describe('tenant quotas on Redis Cluster', () => {
  it('counts a rate quota across subjects on every shard, refusing past the limit', async () => {
    const quota = createRateQuota({
      redis,
      keyPrefix: `herald-${randomUUID()}:tenant:ops`,
      pods: () => 1,
      onRedisError: failOnRedisError,
    });
    // Enough subjects that their keys fall on all three masters.
    for (let subject = 0; subject < 12; subject++) {
      const answers: number[] = [];
      for (let i = 0; i < 4; i++) answers.push(await quota.consume(`org:${subject}`, 3));
      expect(answers.slice(0, 3)).toEqual([0, 0, 0]);
      expect(answers[3]).toBeGreaterThan(0);
    }
  });

  it('caps concurrent counts across two pods with the lease scripts', async () => {
    const keyPrefix = `herald-${randomUUID()}:tenant:subs:`;
    const [a, b] = ['pod-a', 'pod-b'].map((podId) =>
      createConcurrencyQuota({ redis, keyPrefix, podId, pods: () => 2, onRedisError: failOnRedisError }),
    ) as [ReturnType<typeof createConcurrencyQuota>, ReturnType<typeof createConcurrencyQuota>];
    for (let subject = 0; subject < 6; subject++) {
      expect(await a.acquire(`org-${subject}`, 2)).toBe(true);
      expect(await b.acquire(`org-${subject}`, 2)).toBe(true);
      expect(await a.acquire(`org-${subject}`, 2)).toBe(false);
      expect(await b.count(`org-${subject}`)).toBe(2);
      b.release(`org-${subject}`);
      // The release writes B's field without waiting: once Redis has it, A's own one is all that counts.
      await waitFor(`B's release of org-${subject} in Redis`, async () => (await a.count(`org-${subject}`)) === 1, {
        timeoutMs: 30_000,
        intervalMs: 20,
      });
      expect(await a.acquire(`org-${subject}`, 2)).toBe(true);
    }
  });
});
