import { randomUUID } from 'node:crypto';
import { createRedisClient } from '@herald/config/redis';
import { pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createSocketRebalancer, rebalanceKey, type SocketRebalancer } from './socket-rebalancer.js';

// Pods as in-process rebalancers sharing the real test Redis; their sockets are counters, and a shed
// socket reconnects through a least-connections "load balancer" to the least loaded pod.

const redis = createRedisClient(inject('redisUrl'));
const logger = pino({ level: 'silent' });
afterAll(() => redis.quit());

interface SimPod {
  id: string;
  sockets: number;
  shedTotal: number;
  rebalancer: SocketRebalancer;
}

function cluster(prefix: string, now: () => number, maxShedPerSecond = 200) {
  const pods: SimPod[] = [];
  const add = (sockets: number) => {
    const pod = { id: `pod-${pods.length}`, sockets, shedTotal: 0 } as SimPod;
    pod.rebalancer = createSocketRebalancer({
      redis,
      prefix,
      podId: pod.id,
      logger,
      now,
      maxShedPerSecond,
      openSockets: () => pod.sockets,
      shed: (count) => {
        pod.sockets -= count;
        pod.shedTotal += count;
        for (let i = 0; i < count; i++) {
          const target = pods.reduce((least, candidate) => (candidate.sockets < least.sockets ? candidate : least));
          target.sockets++;
        }
        return count;
      },
    });
    pods.push(pod);
    return pod;
  };
  return { pods, add };
}

describe('socket rebalancing across pods (Redis)', () => {
  it('evens out two loaded pods and a third that joins to within 20 %, never shedding more than allowed per second', async () => {
    const prefix = `herald_test_${randomUUID()}:`;
    let clock = 1_000_000;
    const { pods, add } = cluster(prefix, () => clock, 100);
    add(1_000);
    add(1_000);
    for (const pod of pods) await pod.rebalancer.tick();
    expect(pods.map((pod) => pod.shedTotal)).toEqual([0, 0]); // balanced already

    add(0); // the new pod: only new connections would reach it
    for (let second = 0; second < 20; second++) {
      clock += 1_000;
      for (const pod of pods) {
        const before = pod.shedTotal;
        await pod.rebalancer.tick();
        expect(pod.shedTotal - before).toBeLessThanOrEqual(100);
      }
    }
    const total = pods.reduce((sum, pod) => sum + pod.sockets, 0);
    expect(total).toBe(2_000);
    const mean = total / pods.length;
    for (const pod of pods) expect(Math.abs(pod.sockets - mean) / mean).toBeLessThanOrEqual(0.2);
    expect(pods[2]!.sockets).toBeGreaterThan(500);
    await Promise.all(pods.map((pod) => pod.rebalancer.stop()));
    expect(await redis.exists(rebalanceKey(prefix))).toBe(0);
  });

  it('leaves a small excess alone (under 50 sockets over the fair share)', async () => {
    const prefix = `herald_test_${randomUUID()}:`;
    const { pods, add } = cluster(prefix, () => 9_000_000);
    add(60);
    add(20);
    for (const pod of pods) await pod.rebalancer.tick();
    for (const pod of pods) await pod.rebalancer.tick();
    expect(pods.map((pod) => pod.sockets)).toEqual([60, 20]);
    await Promise.all(pods.map((pod) => pod.rebalancer.stop()));
  });

  it('ignores a pod that stopped reporting, and a pod alone never sheds', async () => {
    const prefix = `herald_test_${randomUUID()}:`;
    let clock = 5_000_000;
    const { pods, add } = cluster(prefix, () => clock);
    const busy = add(900);
    const dead = add(0);
    await dead.rebalancer.tick(); // reported once, then silent (crashed)
    clock += 10_000;
    expect(await busy.rebalancer.tick()).toBe(0);
    expect(await redis.hkeys(rebalanceKey(prefix))).toEqual([busy.id]);
    expect(busy.sockets).toBe(900);
    await Promise.all(pods.map((pod) => pod.rebalancer.stop()));
  });

  it('with Redis unreachable a tick fails and nothing is shed', async () => {
    const down = createRedisClient('redis://127.0.0.1:1', {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
    });
    let shed = 0;
    const rebalancer = createSocketRebalancer({
      redis: down,
      prefix: `herald_test_${randomUUID()}:`,
      podId: 'lonely',
      logger,
      openSockets: () => 5_000,
      shed: (count) => {
        shed += count;
        return count;
      },
    });
    await expect(rebalancer.tick()).rejects.toThrow();
    expect(shed).toBe(0);
    down.disconnect();
  });
});
