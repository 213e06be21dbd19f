import { randomUUID } from 'node:crypto';
import { waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from '../apps/api/src/testing/test-api.js';
import { type AppSubscriber, subscribeWithHeraldClient } from './support/herald-clients.js';

// @herald/client when its resubscribe is refused with RATE_LIMITED: it waits `retryAfterMs`, sends the
// subscription again with the cursor it holds, and the application sees every event once.

const ORG = `org-${randomUUID()}`;
const OPS_PER_SECOND = 5;
/** Concurrent request loops of the storm, and how many times the client's socket may be dropped. */
const STORM_LOOPS = 4;
const MAX_DROPS = 25;
const POSTS = 'query($orgId: ID!) { posts(orgId: $orgId, first: 1) { edges { node { id } } } }';

let api: TestApi;
let writer: string;
let subscriber: AppSubscriber;

beforeAll(async () => {
  api = await startTestApi({
    databaseUrl: inject('databaseUrl'),
    listen: true,
    env: { TENANT_OPERATIONS_PER_SECOND: String(OPS_PER_SECOND) },
  });
  writer = await api.token({ sub: 'writer', orgs: [ORG] });
});

afterAll(async () => {
  await subscriber?.client.dispose();
  await api?.close();
});

async function draft(title: string): Promise<string> {
  const created = await api.graphql(
    'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
    { input: { orgId: ORG, title } },
    writer,
  );
  return created.body.data.createPost.id;
}

/** publishPost names no organisation: it counts against the writer, so it passes the organisation's storm. */
async function publish(id: string) {
  const answer = await api.graphql('mutation($id: ID!) { publishPost(id: $id) { id } }', { id }, writer);
  expect(answer.body.errors).toBeUndefined();
}

describe('@herald/client under RATE_LIMITED', () => {
  it('backs off for retryAfterMs and resubscribes with its cursor: nothing missed, nothing twice', async () => {
    const reader = await api.token({ sub: 'reader', orgs: [ORG] });
    subscriber = subscribeWithHeraldClient(`${api.baseUrl!.replace('http', 'ws')}/graphql`, () => reader, ORG, {
      baseMs: 10,
      maxMs: 100,
    });
    const first = await draft('first');
    const during = await draft('during the storm');
    await waitFor('the subscription', async () => {
      const usage = await api.app.quotas.usage(ORG);
      return usage.subscriptions === 1;
    });
    await publish(first);
    await waitFor('the first event', () => subscriber.titles.length === 1);

    // The organisation storms past its operations quota while the client's socket is dropped: a
    // resubscribe meets an exhausted quota (one landing at the very start of a window may pass: then the
    // socket is dropped again, a bounded number of times; the storm outlasts them on a loaded machine).
    const refusedBefore = await refusals();
    const stormUntil = Date.now() + 90_000;
    let storming = true;
    // Over HTTP, as a tenant's clients storm: in-process (`api.graphql`) a refused request never waits
    // for I/O, so the loops starved the event loop and the client's reconnect crept on only when an
    // admitted request read the database, at a window's start, where its resubscribe was admitted too.
    const storm = Promise.all(
      Array.from({ length: STORM_LOOPS }, async () => {
        while (storming && Date.now() < stormUntil) await stormRequest();
      }),
    );
    try {
      await waitFor('the storm to exhaust the quota', async () => (await refusals()) > refusedBefore);
      const rateLimited = () => subscriber.retries.some((retry) => retry.code === 'RATE_LIMITED');
      for (let drop = 0; drop < MAX_DROPS && !rateLimited(); drop++) {
        api.app.webSockets.shed(10);
        await waitFor('a reconnect', () => subscriber.reconnects > drop);
        await waitFor('a refused resubscribe', rateLimited, { timeoutMs: 2_000 }).catch(() => undefined);
      }
      expect(rateLimited()).toBe(true);
      await publish(during);
    } finally {
      storming = false;
      await storm;
    }
    await waitFor('the event published while refused', () => subscriber.titles.length >= 2, { timeoutMs: 15_000 });
    expect(subscriber.titles).toEqual(['first', 'during the storm']);
    // Each wait was the server's retryAfterMs (at most the one-second window) plus at most 10 ms of jitter.
    for (const retry of subscriber.retries.filter((each) => each.code === 'RATE_LIMITED')) {
      expect(retry.delayMs).toBeGreaterThan(0);
      expect(retry.delayMs).toBeLessThanOrEqual(1_010);
    }
    expect(subscriber.errors).toEqual([]);
    expect(subscriber.cursorExpired).toBe(0);
  }, 150_000);
});

async function stormRequest(): Promise<void> {
  const response = await fetch(`${api.baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${writer}` },
    body: JSON.stringify({ query: POSTS, variables: { orgId: ORG } }),
  });
  await response.arrayBuffer();
}

async function refusals(): Promise<number> {
  const metrics = await (await api.fetch('/metrics')).text();
  const line = metrics
    .split('\n')
    .find((row) => row.startsWith('herald_tenant_refusals_total{quota="operationsPerSecond"}'));
  return Number(line?.split(' ')[1] ?? 0);
}
