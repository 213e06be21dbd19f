import { randomUUID } from 'node:crypto';
import { waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ApiProcess } from './support/api-process.js';
import { type PodsOnOwnRedis, startPodsOnOwnRedis } from './support/pods-on-own-redis.js';
import type { OwnRedis } from './support/redis-server.js';
import { createAndPublish, type Subscriber } from './support/subscribers.js';

// No silent drop on publish: posts committed while Redis is down stay in the outbox and
// reach every live subscriber, in commit order and once, when Redis is back (empty: no persistence).

const JWT_SECRET = 'resume-outage-test-secret-0123456789abcdef';
const ORG = `org-${randomUUID()}`;
const POSTS = 20;

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
    subscribersPerPod: 2,
  });
  ({ redis, pods, subscribers, token } = started);
}, 120_000);

afterAll(() => started?.stop());

describe('posts published while Redis is down', () => {
  it('all succeed, and every subscriber gets all of them in order, once, when Redis is back', async () => {
    await createAndPublish(pods[0]!.baseUrl, token, ORG, 'before');
    await waitFor('every subscriber to get the first post', () => subscribers.every((s) => s.count('before') === 1));

    await redis.kill();
    const titles = Array.from({ length: POSTS }, (_, i) => `outage ${i + 1}`);
    for (const [index, title] of titles.entries()) {
      const published = await createAndPublish(pods[index % 2]!.baseUrl, token, ORG, title);
      expect(published.errors).toBeUndefined();
      expect(published.data.publishPost.status).toBe('PUBLISHED');
    }
    await redis.start();

    await waitFor(
      'every subscriber to get the posts of the outage',
      () => subscribers.every((s) => s.titles.filter((title) => title.startsWith('outage')).length >= POSTS),
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    await createAndPublish(pods[1]!.baseUrl, token, ORG, 'after');
    await waitFor('every subscriber to get the post after', () => subscribers.every((s) => s.count('after') === 1));
    for (const subscriber of subscribers) {
      expect(subscriber.titles).toEqual(['before', ...titles, 'after']);
      expect(subscriber.errors).toEqual([]);
      expect(subscriber.connections).toBe(1);
    }
  }, 90_000);
});
