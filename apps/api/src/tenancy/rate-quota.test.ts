import { randomUUID } from 'node:crypto';
import { createRedisClient, type RedisClient } from '@herald/config/redis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createRateQuota, MAX_LIMITERS, type RateQuota } from './rate-quota.js';

// The rate quota on a real Redis: batches taken per pod never let the cluster past the limit in a
// window, and cost far fewer round trips than one per unit.

let redis: RedisClient;
const commands: string[] = [];

beforeAll(async () => {
  redis = createRedisClient(inject('redisUrl'), { enableOfflineQueue: true });
  await redis.ping();
  // Counts the commands this client sends (the batch is visible as fewer round trips).
  const send = redis.sendCommand.bind(redis);
  redis.sendCommand = ((command: { name: string }) => {
    commands.push(command.name);
    return send(command as never);
  }) as typeof redis.sendCommand;
});

afterAll(() => redis.disconnect());

function pod(keyPrefix: string, pods: number, maxBatches?: number): RateQuota {
  return createRateQuota({
    redis,
    keyPrefix,
    maxBatches,
    pods: () => pods,
    onRedisError: (error) => {
      throw error;
    },
  });
}

/** Consumes `count` units for `subject`, alternating quotas; undefined if it took longer than one window. */
async function spend(quotas: RateQuota[], subject: string, limit: number, count: number) {
  const startedAt = performance.now();
  let allowed = 0;
  for (let i = 0; i < count; i++) if ((await quotas[i % quotas.length]!.consume(subject, limit)) === 0) allowed++;
  return performance.now() - startedAt < 900 ? allowed : undefined;
}

describe('rate quota with Redis', () => {
  it('lets 64 concurrent callers share one batch rather than each taking their own', async () => {
    const prefix = `herald-rate-${randomUUID()}`;
    const quota = pod(prefix, 1);
    commands.length = 0;
    // 64 callers at once, a quota of 1,000 (batches of 100): one batch serves all of them.
    const answers = await Promise.all(Array.from({ length: 64 }, () => quota.consume('org:c', 1_000)));
    expect(answers.every((answer) => answer === 0)).toBe(true);
    // One EVALSHA (and an EVAL if this Redis had not loaded the script yet).
    expect(commands.filter((name) => name !== 'ping').length).toBeLessThanOrEqual(2);
  });

  it('lets one pod spend exactly the limit in a window with one round trip per batch', async () => {
    for (let attempt = 0; attempt < 4; attempt++) {
      const prefix = `herald-rate-${randomUUID()}`;
      commands.length = 0;
      const allowed = await spend([pod(prefix, 1)], 'org:a', 1_000, 1_200);
      if (allowed === undefined) continue;
      expect(allowed).toBe(1_000);
      // Ten batches of 100, then the refusals are answered from memory.
      expect(commands.filter((name) => name !== 'ping').length).toBeLessThanOrEqual(12);
      return;
    }
    throw new Error('no attempt fitted in one window');
  });

  it('never lets two pods together past the limit, and loses at most a tenth of it per pod', async () => {
    for (let attempt = 0; attempt < 4; attempt++) {
      const prefix = `herald-rate-${randomUUID()}`;
      const allowed = await spend([pod(prefix, 2), pod(prefix, 2)], 'org:b', 1_000, 2_000);
      if (allowed === undefined) continue;
      expect(allowed).toBeLessThanOrEqual(1_000);
      expect(allowed).toBeGreaterThanOrEqual(900);
      return;
    }
    throw new Error('no attempt fitted in one window');
  });
});

describe('rate quota memory bounds', () => {
  it('past MAX_LIMITERS limits forgets the counts of the least recently used limit, not one used since', async () => {
    for (let attempt = 0; attempt < 4; attempt++) {
      // Without Redis: each distinct limit has its own in-memory limiter, holding its subjects' counts.
      const quota = createRateQuota({
        redis: undefined,
        keyPrefix: `herald-rate-${randomUUID()}`,
        pods: () => 1,
        onRedisError: (error) => {
          throw error;
        },
      });
      const startedAt = performance.now();
      await quota.consume('org:kept', 10);
      await quota.consume('org:gone', 11);
      for (let limit = 12; limit < 12 + MAX_LIMITERS - 2; limit++) await quota.consume('org:filler', limit);
      await quota.consume('org:kept', 10); // limit 10 used again: 11 is the least recently used
      await quota.consume('org:new', 1_000); // one limit more than kept
      const kept = await quota.current('org:kept', 10);
      const gone = await quota.current('org:gone', 11);
      if (performance.now() - startedAt > 900) continue;
      expect(kept).toBe(2);
      // Its limiter was dropped: a new one counts from nothing.
      expect(gone).toBe(0);
      return;
    }
    throw new Error('no attempt fitted in one window');
  });

  it('past its bound of subjects forgets the least recently used batch, not one used since', async () => {
    // The bound made small here, so the whole test fits in one second's window on a loaded machine; the
    // default (MAX_BATCHES) is the same cache with a larger `max`.
    const bound = 200;
    for (let attempt = 0; attempt < 4; attempt++) {
      const quota = pod(`herald-rate-${randomUUID()}`, 1, bound);
      // A quota of 1,000: batches of 100, each spent from memory until its window ends.
      const startedAt = performance.now();
      await quota.consume('org:oldest', 1_000);
      await quota.consume('org:kept', 1_000);
      await Promise.all(Array.from({ length: bound - 2 }, (_, i) => quota.consume(`org:filler-${i}`, 1_000)));
      await quota.consume('org:kept', 1_000); // from its batch: now the most recently used
      commands.length = 0;
      const sent = () => commands.filter((name) => name !== 'ping').length;
      await quota.consume('org:new', 1_000); // a batch for one subject more than kept
      const forNew = sent();
      await quota.consume('org:kept', 1_000);
      const forKept = sent() - forNew;
      await quota.consume('org:oldest', 1_000);
      const forOldest = sent() - forNew - forKept;
      if (performance.now() - startedAt > 900) continue;
      // Still spent from its batch, while the oldest batch (its window not over) was dropped.
      expect(forKept).toBe(0);
      expect(forOldest).toBe(1);
      return;
    }
    throw new Error('no attempt fitted in one window');
  });
});
