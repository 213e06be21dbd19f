import { randomUUID } from 'node:crypto';
import { signToken } from '@herald/auth';
import { createTestSchema, type TestSchema } from '@herald/testing';
import { freePort, waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { type OwnRedis, ownRedis } from './support/redis-server.js';
import { createAndPublish, readMetric, type Subscriber, subscribePostPublished } from './support/subscribers.js';

// No silent drop on publish: posts committed while Redis is down stay in the outbox and
// reach every live subscriber, in commit order and once, when Redis is back (empty: no persistence).

const JWT_SECRET = 'resume-outage-test-secret-0123456789abcdef';
const ORG = `org-${randomUUID()}`;
const POSTS = 20;

let schema: TestSchema;
let redis: OwnRedis;
let pods: ApiProcess[];
let subscribers: Subscriber[];
let token: string;

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  redis = await ownRedis(await freePort());
  await redis.start();
  token = await signToken(JWT_SECRET, { sub: 'writer', orgs: [ORG] });
  const env = { DATABASE_URL: schema.url, REDIS_URL: redis.url, JWT_SECRET };
  pods = await Promise.all([startApiProcess(env), startApiProcess(env)]);
  subscribers = pods.flatMap((pod) =>
    [1, 2].map(() => subscribePostPublished(`ws://127.0.0.1:${pod.port}/graphql`, token, ORG)),
  );
  await waitFor('two subscriptions on each pod', async () => {
    const counts = await Promise.all(pods.map((pod) => readMetric(pod.baseUrl, 'herald_subscriptions_active')));
    return counts.every((count) => count === 2);
  });
}, 120_000);

afterAll(async () => {
  await Promise.all((subscribers ?? []).map((subscriber) => subscriber.client.dispose()));
  await Promise.all((pods ?? []).map((pod) => pod.stop('SIGTERM')));
  await redis?.cleanup();
  await schema?.drop();
});

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
