import { randomUUID } from 'node:crypto';
import { waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ApiProcess } from './support/api-process.js';
import { type PodsOnOwnRedis, startPodsOnOwnRedis } from './support/pods-on-own-redis.js';
import type { OwnRedis } from './support/redis-server.js';
import { createAndPublish, type Subscriber } from './support/subscribers.js';

// Redis restarts (killed, no persistence): every pod resubscribes by itself and later events arrive
// again. publishPost still succeeds during the outage; its event stays in the outbox and goes out once
// Redis is back (test/resume-redis-outage.test.ts pins the order and count).

const JWT_SECRET = 'redis-loss-test-secret-0123456789abcdef';
const ORG = `org-${randomUUID()}`;

let started: PodsOnOwnRedis;
let redis: OwnRedis;
let pods: ApiProcess[];
let subscribers: Subscriber[];
let token: string;

beforeAll(async () => {
  started = await startPodsOnOwnRedis({
    databaseUrl: inject('databaseUrl'),
    jwtSecret: JWT_SECRET,
    orgId: ORG,
    subscribersPerPod: 1,
  });
  ({ redis, pods, subscribers, token } = started);
}, 120_000);

afterAll(() => started?.stop());

describe('Redis restart', () => {
  it('delivers across pods before the outage', async () => {
    await createAndPublish(pods[0]!.baseUrl, token, ORG, 'before');
    await waitFor('both pods to deliver', () => subscribers.every((s) => s.count('before') === 1));
  });

  it('answers /readiness 503 on every pod while Redis is down, and stays alive', async () => {
    await redis.kill();
    for (const pod of pods) {
      await waitFor('readiness 503', async () => (await fetch(`${pod.baseUrl}/readiness`)).status === 503);
      expect(await (await fetch(`${pod.baseUrl}/readiness`)).json()).toEqual({
        ready: false,
        reason: 'redis unreachable',
      });
      expect((await fetch(`${pod.baseUrl}/health`)).status).toBe(200);
    }
  });

  it('keeps publishPost working while Redis is down (the event waits in the outbox)', async () => {
    const published = await createAndPublish(pods[1]!.baseUrl, token, ORG, 'during outage');
    expect(published.errors).toBeUndefined();
    expect(published.data.publishPost.status).toBe('PUBLISHED');
  });

  it('resubscribes every pod after Redis comes back, and later events arrive again', async () => {
    await redis.start();
    // Probe until each pod's subscriber connection is back (ioredis reconnects with backoff).
    let probe = 0;
    await waitFor(
      'every pod to receive events again',
      async () => {
        probe++;
        await createAndPublish(pods[probe % 2]!.baseUrl, token, ORG, `probe ${probe}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
        return subscribers.every((s) => s.titles.some((title) => title.startsWith('probe')));
      },
      { timeoutMs: 30_000, intervalMs: 300 },
    );
    for (const pod of pods) {
      await waitFor('readiness 200 again', async () => (await fetch(`${pod.baseUrl}/readiness`)).status === 200);
    }
    await createAndPublish(pods[0]!.baseUrl, token, ORG, 'after restart');
    await waitFor('both pods to deliver after the restart', () =>
      subscribers.every((s) => s.count('after restart') === 1),
    );
    for (const subscriber of subscribers) {
      expect(subscriber.count('during outage')).toBe(1);
      expect(subscriber.errors).toEqual([]);
      // The WebSocket itself never dropped: only the pod's Redis connection did.
      expect(subscriber.connections).toBe(1);
    }
  });
});
