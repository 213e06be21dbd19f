import { randomUUID } from 'node:crypto';
import type { RedisClient } from '@herald/config/redis';
import { webhookRedisKeys } from '@herald/contracts';
import { type RedisClusterWithClient, startRedisClusterWithClient } from '@herald/testing/redis-cluster-client';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { burstOf, createEndpointRate } from './endpoint-rate.js';
import { countOrgPermits, createOrgPermits } from './org-permits.js';

// The webhook throttles (an organisation's attempts in flight, an endpoint's sends per second) shared by
// two dispatchers through a real Redis Cluster of three masters: each key is hash-tagged by its
// organisation or endpoint, so every script runs on that key's shard.

let cluster: RedisClusterWithClient;
let redis: RedisClient;
const logger = pino({ level: 'silent' });
const keys = webhookRedisKeys(`herald-test:${randomUUID()}:`);

beforeAll(async () => {
  cluster = await startRedisClusterWithClient();
  redis = cluster.redis;
}, 40_000);

afterAll(() => cluster?.stop());

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** The port of the master holding `key`'s slot. */
async function shardOf(key: string): Promise<number | undefined> {
  const ranges = await redis.cluster('SLOTS');
  const slot = (await redis.cluster('KEYSLOT', key)) as number;
  return ranges.find(([from, to]) => slot >= from && slot <= to)?.[2]?.[1];
}

/** `perShard` ids made by `make` for every master of the cluster (keys named by `keyOf`). */
async function idsOnEveryShard(make: () => string, keyOf: (id: string) => string, perShard = 3): Promise<string[]> {
  const byShard = new Map<number | undefined, string[]>();
  for (let tries = 0; tries < 500; tries++) {
    const id = make();
    const shard = await shardOf(keyOf(id));
    const ids = byShard.get(shard) ?? [];
    if (ids.length < perShard) ids.push(id);
    byShard.set(shard, ids);
    if (byShard.size === cluster.ports.length && [...byShard.values()].every((list) => list.length === perShard)) break;
  }
  expect(byShard.size).toBe(cluster.ports.length);
  return [...byShard.values()].flat();
}

describe('webhook throttles on Redis Cluster', () => {
  it("hold an organisation's in-flight cap across two dispatchers, for organisations on every shard", async () => {
    const gate = (name: string, counts: { inUse: number; waiting: number }) =>
      createOrgPermits({
        redis,
        keys,
        consumerName: name,
        leaseMs: 5_000,
        capOf: () => 3,
        onChange: () => {},
        dispatchers: () => 2,
        inUse: () => counts.inUse,
        waiting: () => counts.waiting,
        logger,
      });
    const aCounts = { inUse: 0, waiting: 6 };
    const bCounts = { inUse: 0, waiting: 2 };
    const a = gate('a', aCounts);
    const b = gate('b', bCounts);
    // Enough organisations that their keys fall on all three masters.
    const orgs = await idsOnEveryShard(
      () => `org-cluster-${randomUUID()}`,
      (orgId) => keys.orgInFlight(orgId),
    );
    for (const orgId of orgs) {
      a.want(orgId, 6);
      await until(`A holding ${orgId}'s cap`, () => a.limit(orgId) === 3);
      b.want(orgId, 2);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(b.limit(orgId)).toBe(0);
      expect(await countOrgPermits(redis, keys, orgId)).toBe(3);
    }
    await Promise.all([a.stop(), b.stop()]);
    for (const orgId of orgs) expect(await countOrgPermits(redis, keys, orgId)).toBe(0);
  });

  it("hold an endpoint to its rate across two dispatchers, with the endpoint's line kept in the cluster", async () => {
    const rate = 20;
    const windowMs = 1_500;
    const dispatchers = [0, 1].map(() => createEndpointRate({ redis, keys, dispatchers: () => 2, logger }));
    const endpoints = await idsOnEveryShard(
      () => `we_cluster${randomUUID().slice(0, 12)}`,
      (id) => keys.endpointRate(id),
      2,
    );
    const sent = new Map(endpoints.map((id) => [id, 0]));
    const startedAt = Date.now();
    // Both dispatchers ask as fast as they can for every endpoint, for one window (bounded in time).
    while (Date.now() - startedAt < windowMs) {
      for (const endpointId of endpoints) {
        for (const dispatcher of dispatchers) {
          if (dispatcher.tryTake(endpointId, rate, 4, () => {})) sent.set(endpointId, sent.get(endpointId)! + 1);
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    const elapsedMs = Date.now() - startedAt;
    for (const dispatcher of dispatchers) dispatcher.stop();
    const most = Math.ceil((rate * elapsedMs) / 1_000) + burstOf(rate) + 1;
    for (const endpointId of endpoints) {
      expect(sent.get(endpointId)).toBeLessThanOrEqual(most);
      expect(sent.get(endpointId)).toBeGreaterThanOrEqual(Math.floor((rate * windowMs) / 2_000));
      // The line is the one in Redis (away from Redis, each would keep a local share instead).
      expect(await redis.exists(keys.endpointRate(endpointId))).toBe(1);
    }
  });
});
