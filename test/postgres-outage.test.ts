import { waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiOnOwnPostgres, POSTS_QUERY as POSTS, startApiOnOwnPostgres } from './support/api-on-own-postgres.js';
import type { ApiProcess } from './support/api-process.js';
import { postGraphql } from './support/graphql-http.js';
import type { OwnPostgres } from './support/postgres-cluster.js';
import { type Subscriber, subscribePostPublished } from './support/subscribers.js';

// The whole PostgreSQL server goes away for 10 s (a restart, a failover that takes a while): a cluster
// of this test's own, stopped with `pg_ctl stop -m fast` and started again on the same port. The API
// stays up, answers 503 meanwhile (requests and /readiness), keeps its WebSockets, and serves again by
// itself once the server is back.

const JWT_SECRET = 'postgres-outage-test-secret-0123456789abcdef';
const OUTAGE_MS = 10_000;

let setup: ApiOnOwnPostgres | undefined;
let cluster: OwnPostgres;
let api: ApiProcess;
let subscriber: Subscriber;
let token: string;
let ORG: string;

beforeAll(async () => {
  setup = await startApiOnOwnPostgres(JWT_SECRET);
  ({ cluster, api, token, orgId: ORG } = setup);
  subscriber = subscribePostPublished(`ws://127.0.0.1:${api.port}/graphql`, token, ORG);
  await waitFor('the subscriber to connect', () => subscriber.connections === 1);
}, 180_000);

afterAll(async () => {
  await subscriber?.client.dispose();
  await setup?.stop();
});

describe('a 10 s PostgreSQL outage', () => {
  it('is answered with 503s while the server is down, and the process stays up', async () => {
    expect((await postGraphql(api.baseUrl, token, POSTS, { orgId: ORG })).status).toBe(200);
    const stoppedAt = Date.now();
    await cluster.stop();

    await waitFor('readiness 503', async () => (await fetch(`${api.baseUrl}/readiness`)).status === 503);
    expect(await (await fetch(`${api.baseUrl}/readiness`)).json()).toEqual({
      ready: false,
      reason: 'database unreachable',
    });
    const answer = await postGraphql(api.baseUrl, token, POSTS, { orgId: ORG });
    expect(answer.status).toBe(503);
    expect(answer.retryAfter).not.toBeNull();
    expect(answer.body.errors?.map((error) => error.extensions?.code)).toEqual(['SERVICE_UNAVAILABLE']);
    const mutation = await postGraphql(
      api.baseUrl,
      token,
      'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
      { input: { orgId: ORG, title: 'during outage' } },
    );
    expect(mutation.status).toBe(503);
    expect(mutation.body.errors?.[0]?.extensions?.code).toBe('SERVICE_UNAVAILABLE');

    // Stay down for the whole outage, checking now and then that the process still answers.
    while (Date.now() - stoppedAt < OUTAGE_MS) {
      expect((await fetch(`${api.baseUrl}/health`)).status).toBe(200);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
    expect(api.child.exitCode).toBeNull();
  });

  it('serves again by itself once the server is back, on the same WebSocket', async () => {
    await cluster.start();
    await waitFor('readiness 200', async () => (await fetch(`${api.baseUrl}/readiness`)).status === 200, {
      timeoutMs: 30_000,
      intervalMs: 200,
    });
    const answer = await postGraphql(api.baseUrl, token, POSTS, { orgId: ORG });
    expect(answer.status).toBe(200);
    expect(answer.body.errors).toBeUndefined();

    const created = await postGraphql(
      api.baseUrl,
      token,
      'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
      { input: { orgId: ORG, title: 'after outage' } },
    );
    const published = await postGraphql(api.baseUrl, token, 'mutation($id: ID!) { publishPost(id: $id) { id } }', {
      id: created.body.data.createPost.id,
    });
    expect(published.status).toBe(200);
    await waitFor('the subscriber to receive the post', () => subscriber.count('after outage') === 1);
    expect(subscriber.connections).toBe(1);
    expect(api.child.exitCode).toBeNull();
  });
});
