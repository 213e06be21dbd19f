import { randomUUID } from 'node:crypto';
import { type Client, createClient } from 'graphql-ws';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { WebSocket } from 'ws';
import { startTestApi, type TestApi } from '../testing/test-api.js';

// Staging and production sharing one Redis: same organisation id on both, different
// HERALD_REDIS_PREFIX. A second production pod (same prefix) is the control that events do cross pods.

const ORG = `org-${randomUUID()}`;
const RUN = randomUUID().slice(0, 8);
const SUBSCRIBE = 'subscription($orgId: ID!) { postPublished(orgId: $orgId) { title } }';
/** Publishes until the subscriber has joined (its SUBSCRIBE to Redis is asynchronous): a bound, not a timing. */
const MAX_PUBLISH_ATTEMPTS = 50;

interface Listener {
  client: Client;
  titles: string[];
}

let staging: TestApi;
let production: TestApi;
let production2: TestApi;
const listeners: Listener[] = [];

async function installation(prefix: string): Promise<TestApi> {
  return startTestApi({
    databaseUrl: inject('databaseUrl'),
    listen: true,
    env: { REDIS_URL: inject('redisUrl'), HERALD_REDIS_PREFIX: prefix },
  });
}

async function listen(api: TestApi): Promise<Listener> {
  const token = await api.token({ sub: 'reader', orgs: [ORG] });
  const listener: Listener = {
    titles: [],
    client: createClient({
      url: `${api.baseUrl!.replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authToken: token },
      lazy: false,
      onNonLazyError: () => {},
    }),
  };
  listener.client.subscribe<{ postPublished: { title: string } }>(
    { query: SUBSCRIBE, variables: { orgId: ORG } },
    {
      next: (result) => {
        if (result.data) listener.titles.push(result.data.postPublished.title);
      },
      error: () => {},
      complete: () => {},
    },
  );
  listeners.push(listener);
  return listener;
}

/** Publishes `title` through `api` until `until` has seen it. */
async function publishUntilSeen(api: TestApi, title: string, until: Listener): Promise<void> {
  const token = await api.token({ sub: 'writer', orgs: [ORG] });
  for (let attempt = 0; attempt < MAX_PUBLISH_ATTEMPTS && !until.titles.includes(title); attempt++) {
    await api.createAndPublish(token, ORG, title);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  expect(until.titles).toContain(title);
}

beforeAll(async () => {
  [staging, production, production2] = await Promise.all([
    installation(`test-${RUN}-staging:`),
    installation(`test-${RUN}-production:`),
    installation(`test-${RUN}-production:`),
  ]);
});

afterAll(async () => {
  await Promise.all(listeners.map((listener) => listener.client.dispose()));
  await Promise.all([staging, production, production2].map((api) => api?.close()));
});

describe('HERALD_REDIS_PREFIX', () => {
  it('keeps two installations on one Redis apart, even for the same organisation id', async () => {
    const onStaging = await listen(staging);
    const onProduction2 = await listen(production2);

    await publishUntilSeen(production, 'from production', onProduction2);
    await publishUntilSeen(staging, 'from staging', onStaging);
    // Both subscribers were live while the other installation published (each saw its own event after).
    await publishUntilSeen(production, 'from production, later', onProduction2);

    expect(onStaging.titles.every((title) => title === 'from staging')).toBe(true);
    expect(onProduction2.titles.every((title) => title.startsWith('from production'))).toBe(true);
  });
});
