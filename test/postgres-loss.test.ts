import { randomUUID } from 'node:crypto';
import { signToken } from '@herald/auth';
import { createOwnDatabase, type OwnDatabase } from '@herald/testing';
import { waitFor } from '@herald/testing/ports';
import { type Client, createClient } from 'graphql-ws';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { WebSocket } from 'ws';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { type GraphqlAnswer, isOkOrUnavailable, postGraphql } from './support/graphql-http.js';
import { type Subscriber, subscribePostPublished } from './support/subscribers.js';
import { createPostPublishedEndpoint, startWebhookReceiver, type WebhookReceiver } from './support/webhooks.js';

// A managed PostgreSQL failover ends every backend (`pg_terminate_backend`). The API (single mode: its
// own in-process webhook dispatcher polls the same database) must not exit, must answer every request
// meanwhile with data or 503 SERVICE_UNAVAILABLE (never a 500, never a hang), must keep its WebSockets,
// must lose no webhook, and must recover by itself. Only this file's own database is terminated.

const JWT_SECRET = 'postgres-loss-test-secret-0123456789abcdef';
const ORG = `org-${randomUUID()}`;
/** Bounded load: workers × iterations requests, while the backends are terminated TERMINATIONS times. */
const LOAD_WORKERS = 4;
const LOAD_ITERATIONS = 25;
const TERMINATIONS = 6;
const TERMINATION_GAP_MS = 150;
/** Bound on redelivering events whose dispatch was cut by a termination (see the last test). */
const WEBHOOK_RECOVERY_TIMEOUT_MS = 150_000;

let own: OwnDatabase;
let api: ApiProcess;
let subscriber: Subscriber;
let token: string;
let receiver: WebhookReceiver;
/** Sockets whose every event loads the author from the database (DataLoader per event). */
const AUTHOR_SOCKETS = 5;
interface AuthorSocket {
  client: Client;
  titles: string[];
  errorCodes: unknown[];
  connections: number;
}
let authorSockets: AuthorSocket[] = [];

function subscribeWithAuthor(): AuthorSocket {
  const socket: AuthorSocket = { client: undefined as unknown as Client, titles: [], errorCodes: [], connections: 0 };
  socket.client = createClient({
    url: `ws://127.0.0.1:${api.port}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authToken: token },
    lazy: false,
    onNonLazyError: () => {},
    on: { connected: () => socket.connections++ },
  });
  socket.client.subscribe<{ postPublished: { title: string; author: { name: string } } }>(
    {
      query: 'subscription($orgId: ID!) { postPublished(orgId: $orgId) { title author { name } } }',
      variables: { orgId: ORG },
    },
    {
      next: (result) => {
        for (const error of result.errors ?? []) socket.errorCodes.push(error.extensions?.code);
        if (result.data) socket.titles.push(result.data.postPublished.title);
      },
      error: (error) => socket.errorCodes.push(String(error)),
      complete: () => {},
    },
  );
  return socket;
}

const CREATE = 'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }';
const PUBLISH = 'mutation($id: ID!) { publishPost(id: $id) { id title status } }';
const POSTS = 'query($orgId: ID!) { posts(orgId: $orgId, first: 5) { edges { node { id author { name } } } } }';

beforeAll(async () => {
  own = await createOwnDatabase(inject('databaseUrl'));
  receiver = await startWebhookReceiver();
  token = await signToken(JWT_SECRET, { sub: 'writer', name: 'Writer', orgs: [ORG] });
  api = await startApiProcess({
    DATABASE_URL: own.url,
    JWT_SECRET,
    WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
    WEBHOOK_RETRY_BASE_MS: '100',
    // Leases of cut attempts expire after the timeout plus a margin: keep recovery short.
    WEBHOOK_TIMEOUT_MS: '2000',
    // The load is one organisation as fast as it goes; every answer must be data or 503, never 429.
    TENANT_OPERATIONS_PER_SECOND: '0',
    TENANT_PUBLISHES_PER_SECOND: '0',
  });
  await createPostPublishedEndpoint(api.baseUrl, token, ORG, receiver.url);
  subscriber = subscribePostPublished(`ws://127.0.0.1:${api.port}/graphql`, token, ORG);
  authorSockets = Array.from({ length: AUTHOR_SOCKETS }, subscribeWithAuthor);
  await waitFor('the subscribers to connect', () =>
    [subscriber, ...authorSockets].every((socket) => socket.connections === 1),
  );
}, 120_000);

afterAll(async () => {
  await subscriber?.client.dispose();
  await Promise.all(authorSockets.map((socket) => socket.client.dispose()));
  await api?.stop('SIGTERM');
  await receiver?.close();
  await own?.drop();
});

/** Creates and publishes one post; the id of the post when both steps succeeded. */
async function publishOne(title: string, answers: GraphqlAnswer[]): Promise<string | undefined> {
  const created = await postGraphql(api.baseUrl, token, CREATE, { input: { orgId: ORG, title } });
  answers.push(created);
  if (created.status !== 200 || !created.body.data) return undefined;
  const published = await postGraphql(api.baseUrl, token, PUBLISH, { id: created.body.data.createPost.id });
  answers.push(published);
  return published.status === 200 && published.body.data ? (published.body.data.publishPost.id as string) : undefined;
}

describe('PostgreSQL backends terminated under HTTP, WebSocket and webhook load', () => {
  const published: string[] = [];

  it('never exits and answers every request with data or 503 SERVICE_UNAVAILABLE', async () => {
    const answers: GraphqlAnswer[] = [];
    let loadDone = false;
    const load = Promise.all(
      Array.from({ length: LOAD_WORKERS }, async (_, worker) => {
        for (let i = 0; i < LOAD_ITERATIONS; i++) {
          if (worker % 2 === 0) {
            const id = await publishOne(`load ${worker}.${i}`, answers);
            if (id) published.push(id);
          } else {
            answers.push(await postGraphql(api.baseUrl, token, POSTS, { orgId: ORG }));
          }
        }
      }),
    ).finally(() => {
      loadDone = true;
    });
    let terminated = 0;
    for (let i = 0; i < TERMINATIONS && !loadDone; i++) {
      await waitFor('the API to hold connections again', async () => (await own.backendCount()) > 0);
      terminated += await own.terminateBackends();
      await new Promise((resolve) => setTimeout(resolve, TERMINATION_GAP_MS));
    }
    await load;

    expect(terminated).toBeGreaterThan(0);
    expect(api.child.exitCode).toBeNull();
    expect(answers.filter((answer) => !isOkOrUnavailable(answer))).toEqual([]);
    expect(published.length).toBeGreaterThan(0);
    // Events whose author lookup was cut answer with a coded error on the same, still open socket.
    for (const socket of authorSockets) {
      expect(socket.errorCodes.filter((code) => code !== 'SERVICE_UNAVAILABLE')).toEqual([]);
      expect(socket.connections).toBe(1);
    }
  });

  it('recovers by itself: ready again, the same WebSocket gets new events, no webhook is lost', {
    timeout: WEBHOOK_RECOVERY_TIMEOUT_MS + 60_000,
  }, async () => {
    await waitFor('readiness 200', async () => (await fetch(`${api.baseUrl}/readiness`)).status === 200, {
      timeoutMs: 30_000,
    });
    const after = await publishOne('after failover', []);
    expect(after).toBeDefined();
    published.push(after!);
    await waitFor('the subscriber to receive the post', () => subscriber.count('after failover') === 1);
    await waitFor('every author socket to receive it with its author', () =>
      authorSockets.every((socket) => socket.titles.includes('after failover')),
    );
    expect(subscriber.connections).toBe(1);
    expect(authorSockets.every((socket) => socket.connections === 1)).toBe(true);
    expect(subscriber.errors).toEqual([]);
    // An event whose fan-out or attempt was cut by the termination waits for its lease (or the relay's
    // requeue, 120 s in today's dispatcher) to expire: late, never lost.
    await waitFor(
      'every published post to reach the webhook receiver',
      () => published.every((id) => receiver.received.has(id)),
      { timeoutMs: WEBHOOK_RECOVERY_TIMEOUT_MS, intervalMs: 200 },
    );
    expect(api.child.exitCode).toBeNull();
  });
});
