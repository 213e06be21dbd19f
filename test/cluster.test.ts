import { randomUUID } from 'node:crypto';
import { signToken } from '@herald/auth';
import { createTestSchema, type TestSchema } from '@herald/testing';
import { waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { type NginxProcess, startNginx } from './support/nginx.js';
import { createAndPublish, readMetric, type Subscriber, subscribePostPublished } from './support/subscribers.js';

// Three Redis-backed API pods behind the nginx config in deploy/nginx, real graphql-ws clients through
// nginx, a publish through one pod, and a pod taken down with SIGTERM.

const JWT_SECRET = 'cluster-test-secret-0123456789abcdef';
const ORG = `org-${randomUUID()}`;
const SUBSCRIBERS = 9;

let schema: TestSchema;
let pods: ApiProcess[];
let nginx: NginxProcess;
let subscribers: Subscriber[];
let token: string;

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  token = await signToken(JWT_SECRET, { sub: 'writer', name: 'Writer', orgs: [ORG] });
  const env = { DATABASE_URL: schema.url, REDIS_URL: inject('redisUrl'), JWT_SECRET, SHUTDOWN_GRACE_MS: '5000' };
  // Started together, so their migrations race: Kysely's migration lock must serialise them.
  pods = await Promise.all([startApiProcess(env), startApiProcess(env), startApiProcess(env)]);
  nginx = await startNginx(pods.map((pod) => pod.port));
}, 120_000);

afterAll(async () => {
  await Promise.all((subscribers ?? []).map((subscriber) => subscriber.client.dispose()));
  await nginx?.stop();
  await Promise.all((pods ?? []).map((pod) => pod.stop('SIGTERM')));
  await schema?.drop();
});

async function activeSubscriptions(among: ApiProcess[]): Promise<number[]> {
  return Promise.all(among.map((pod) => readMetric(pod.baseUrl, 'herald_subscriptions_active')));
}

describe('cluster of three pods behind nginx', () => {
  it('answers HTTP GraphQL through nginx', async () => {
    const response = await fetch(`${nginx.baseUrl}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: '{ me { id } }' }),
    });
    expect(await response.json()).toEqual({ data: { me: { id: 'writer' } } });
  });

  it('delivers a post published through one pod exactly once to every subscriber on every pod', async () => {
    subscribers = Array.from({ length: SUBSCRIBERS }, () =>
      subscribePostPublished(`ws://127.0.0.1:${nginx.port}/graphql`, token, ORG),
    );
    await waitFor('every subscription to be active', async () => {
      const counts = await activeSubscriptions(pods);
      return counts.reduce((a, b) => a + b, 0) === SUBSCRIBERS;
    });
    // nginx spreads the sockets: every pod serves some of them.
    const perPod = await activeSubscriptions(pods);
    expect(perPod.every((count) => count > 0)).toBe(true);

    const published = await createAndPublish(pods[0]!.baseUrl, token, ORG, 'first');
    expect(published.errors).toBeUndefined();
    // A second post as a marker: events on a subscription arrive in order, so once the marker is
    // everywhere, any duplicate of "first" would already have arrived.
    await createAndPublish(pods[2]!.baseUrl, token, ORG, 'marker');
    await waitFor('every subscriber to receive both posts', () => subscribers.every((s) => s.count('marker') === 1));
    for (const subscriber of subscribers) {
      expect(subscriber.titles).toEqual(['first', 'marker']);
      expect(subscriber.errors).toEqual([]);
    }
  });

  it('after SIGTERM on a pod, its clients reconnect through nginx and receive the next post', async () => {
    const [before] = [await activeSubscriptions(pods)];
    const victim = pods[1]!;
    const survivors = [pods[0]!, pods[2]!];
    const onVictim = before[1]!;
    expect(onVictim).toBeGreaterThan(0);

    expect(await victim.stop('SIGTERM')).toBe(0);
    await waitFor(
      "the victim pod's clients to resubscribe on the surviving pods",
      async () => (await activeSubscriptions(survivors)).reduce((a, b) => a + b, 0) === SUBSCRIBERS,
      { timeoutMs: 30_000 },
    );
    expect(subscribers.filter((s) => s.connections >= 2)).toHaveLength(onVictim);

    await createAndPublish(pods[0]!.baseUrl, token, ORG, 'after failover');
    await waitFor('every subscriber to receive the post after failover', () =>
      subscribers.every((s) => s.count('after failover') === 1),
    );
    for (const subscriber of subscribers) expect(subscriber.count('after failover')).toBe(1);
  });
});
