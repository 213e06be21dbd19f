import { randomUUID } from 'node:crypto';
import { Socket } from 'node:net';
import { signToken } from '@herald/auth';
import { createHeraldClient, type HeraldClient } from '@herald/client';
import { createTestSchema, type TestSchema } from '@herald/testing';
import { freePort, waitFor } from '@herald/testing/ports';
import { type Client, createClient } from 'graphql-ws';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { WebSocket } from 'ws';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { type OwnRedis, ownRedis } from './support/redis-server.js';
import { createAndPublish, readMetric } from './support/subscribers.js';

// A resume whose history can't be read (Redis paused or gone) is told so with a coded, retryable
// `error` (HISTORY_UNAVAILABLE) — never INTERNAL_SERVER_ERROR, never `complete` — and @herald/client
// sends the subscription again with the same cursor after a backoff, missing nothing.

const JWT_SECRET = 'history-unavailable-test-secret-0123456789abcdef';
const ORG = `org-${randomUUID()}`;
const QUERY = 'subscription($orgId: ID!, $after: String) { postPublished(orgId: $orgId, after: $after) { id title } }';
/** Longer than the API's Redis command timeout (5 s): a history read during the pause times out. */
const PAUSE_MS = 6_500;

let schema: TestSchema;
let redis: OwnRedis;
let pod: ApiProcess;
let token: string;
let url: string;
const clients: Array<Client | HeraldClient> = [];

interface Seen {
  titles: string[];
  cursors: string[];
  errors: Array<{ message?: string; extensions?: { code?: string } }>;
  completed: boolean;
}

function rawSubscribe(variables: Record<string, unknown>): Seen {
  const seen: Seen = { titles: [], cursors: [], errors: [], completed: false };
  const client = createClient({ url, webSocketImpl: WebSocket, connectionParams: { authToken: token } });
  clients.push(client);
  client.subscribe<{ postPublished: { title: string } }>(
    { query: QUERY, variables },
    {
      next: (result) => {
        if (result.errors) seen.errors.push(...(result.errors as Seen['errors']));
        if (result.data) seen.titles.push(result.data.postPublished.title);
        seen.cursors.push(String((result.extensions as { cursor?: string } | undefined)?.cursor));
      },
      error: (error) => seen.errors.push(...(Array.isArray(error) ? error : [{ message: String(error) }])),
      complete: () => {
        seen.completed = true;
      },
    },
  );
  return seen;
}

/** Sends one inline command to the test's own Redis; resolves with the first reply line. */
function redisCommand(command: string): Promise<string> {
  const port = Number(new URL(redis.url).port);
  return new Promise((resolve, reject) => {
    const socket = new Socket();
    socket.once('error', reject);
    socket.connect(port, '127.0.0.1', () => socket.write(`${command}\r\n`));
    socket.once('data', (data) => {
      socket.destroy();
      const reply = String(data).split('\r\n')[0] ?? '';
      if (reply.startsWith('-')) reject(new Error(reply));
      else resolve(reply);
    });
  });
}

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  redis = await ownRedis(await freePort());
  await redis.start();
  token = await signToken(JWT_SECRET, { sub: 'reader', orgs: [ORG] });
  pod = await startApiProcess({ DATABASE_URL: schema.url, REDIS_URL: redis.url, JWT_SECRET });
  url = `ws://127.0.0.1:${pod.port}/graphql`;
}, 120_000);

afterAll(async () => {
  await Promise.allSettled(clients.map((client) => client.dispose()));
  await pod?.stop('SIGTERM');
  await redis?.cleanup();
  await schema?.drop();
});

describe('resuming while the history cannot be read', () => {
  it('answers HISTORY_UNAVAILABLE (no complete), and @herald/client retries with the same cursor until it has every event once', async () => {
    // A live subscriber keeps the organisation's channel subscribed on the pod, as on a busy pod.
    const live = rawSubscribe({ orgId: ORG });
    await waitFor(
      'the live subscription',
      async () => (await readMetric(pod.baseUrl, 'herald_subscriptions_active')) === 1,
    );
    for (const title of ['one', 'two', 'three']) await createAndPublish(pod.baseUrl, token, ORG, title);
    await waitFor('three live events', () => live.titles.length === 3);
    const cursor = live.cursors[0]!;

    // Redis answers no client for a while: the pod's history read times out.
    await redisCommand(`CLIENT PAUSE ${PAUSE_MS} ALL`);
    const raw = rawSubscribe({ orgId: ORG, after: cursor });
    const retries: string[] = [];
    const titles: string[] = [];
    const errors: unknown[] = [];
    const herald = createHeraldClient({
      url,
      webSocketImpl: WebSocket,
      token: () => token,
      reconnect: { baseMs: 200, maxMs: 1_000 },
      onRetry: (code) => retries.push(code),
    });
    clients.push(herald);
    herald.subscribe<{ postPublished: { title: string } }>(
      { query: QUERY, variables: { orgId: ORG, after: cursor } },
      {
        next: (result) => {
          if (result.data) titles.push(result.data.postPublished.title);
        },
        error: (error) => errors.push(error),
        complete: () => errors.push('complete'),
      },
    );

    await waitFor('the refusal', () => raw.errors.length > 0, { timeoutMs: 15_000 });
    expect(raw.errors.map((error) => error.extensions?.code)).toEqual(['HISTORY_UNAVAILABLE']);
    expect(raw.completed).toBe(false);
    expect(raw.titles).toEqual([]);

    // Once Redis answers again, the client's retry replays from its cursor, then goes live.
    await waitFor('the replay after the pause', () => titles.length >= 2, { timeoutMs: 30_000, intervalMs: 100 });
    await createAndPublish(pod.baseUrl, token, ORG, 'four');
    await waitFor('the live event', () => titles.includes('four'), { timeoutMs: 10_000 });
    expect(titles).toEqual(['two', 'three', 'four']);
    expect(retries.length).toBeGreaterThanOrEqual(1);
    expect(new Set(retries)).toEqual(new Set(['HISTORY_UNAVAILABLE']));
    expect(errors).toEqual([]);
  }, 90_000);

  it('answers HISTORY_UNAVAILABLE at once while Redis is down', async () => {
    const before = await readMetric(pod.baseUrl, 'herald_subscriptions_active');
    const live = rawSubscribe({ orgId: ORG });
    // Live before the publish: a post published before the subscription started is not its to get.
    await waitFor(
      'the live subscription',
      async () => (await readMetric(pod.baseUrl, 'herald_subscriptions_active')) === before + 1,
    );
    await createAndPublish(pod.baseUrl, token, ORG, 'five');
    await waitFor('the live event', () => live.titles.includes('five'));
    await redis.kill();
    const raw = rawSubscribe({ orgId: ORG, after: live.cursors.at(-1) });
    await waitFor('the refusal', () => raw.errors.length > 0, { timeoutMs: 15_000 });
    expect(raw.errors.map((error) => error.extensions?.code)).toEqual(['HISTORY_UNAVAILABLE']);
    expect(raw.completed).toBe(false);
    await redis.start();
  }, 60_000);
});
