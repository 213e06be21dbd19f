import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { openAckedSocket, openRawSocket } from '../testing/raw-socket.js';
import { type GraphQLResponse, startTestApi, type TestApi } from '../testing/test-api.js';

// Quotas on every door of one API (single mode, PostgreSQL, memory limiters): the HTTP fast path and
// Yoga's pipeline, publishPost, WebSocket subscribe and sockets per user. Limits are lowered through the
// environment, as an operator would; test/tenant-quotas-cluster.test.ts covers two pods sharing Redis.

const OPS_PER_SECOND = 20;
const POSTS = '{ posts(orgId: "ORG", first: 1) { edges { node { id } } } }';
const SUBSCRIBE = 'subscription($orgId: ID!) { postPublished(orgId: $orgId) { id } }';

let api: TestApi;
let wsUrl: string;

beforeAll(async () => {
  api = await startTestApi({
    databaseUrl: inject('databaseUrl'),
    listen: true,
    env: {
      TENANT_OPERATIONS_PER_SECOND: String(OPS_PER_SECOND),
      TENANT_PUBLISHES_PER_SECOND: '2',
      TENANT_SOCKETS_PER_USER: '2',
      TENANT_SUBSCRIPTIONS: '2',
    },
  });
  wsUrl = `${api.baseUrl!.replace('http', 'ws')}/graphql`;
});

afterAll(() => api.close());

/** A GraphQL POST over the real socket: the HTTP fast path answers it. */
async function overHttp(query: string, token: string): Promise<GraphQLResponse> {
  const response = await fetch(`${api.baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query }),
  });
  return { status: response.status, headers: response.headers, body: await response.json() };
}

/** Sends `query` until one is refused (bounded: ten seconds' worth of the quota). */
async function untilRefused(send: () => Promise<GraphQLResponse>): Promise<{ refusal: GraphQLResponse; sent: number }> {
  for (let sent = 1; sent <= OPS_PER_SECOND * 10; sent++) {
    const answer = await send();
    if (answer.status !== 200) return { refusal: answer, sent };
    expect(answer.body.errors).toBeUndefined();
  }
  throw new Error('never refused');
}

function expectRateLimited(answer: GraphQLResponse, limit: string) {
  expect(answer.status).toBe(429);
  const retryAfter = Number(answer.headers.get('retry-after'));
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  const [error] = answer.body.errors!;
  expect(error!.extensions).toMatchObject({ code: 'RATE_LIMITED', limit });
  expect(error!.extensions!.retryAfterMs).toBeGreaterThan(0);
  expect(error!.extensions!.retryAfterMs).toBeLessThanOrEqual(1_000);
  expect(answer.body.data ?? null).toBeNull();
}

describe('operationsPerSecond over HTTP', () => {
  it('refuses an organisation past its quota on the fast path with 429, Retry-After and RATE_LIMITED', async () => {
    const token = await api.token({ sub: 'fast', orgs: ['org-fast'] });
    const before = await routeCount('compiled');
    const { refusal, sent } = await untilRefused(() => overHttp(POSTS.replace('ORG', 'org-fast'), token));
    expectRateLimited(refusal, 'operationsPerSecond');
    expect(sent).toBeGreaterThan(OPS_PER_SECOND);
    // The fast path answered: the compiled route counted the requests and the refusal.
    expect((await routeCount('compiled')) - before).toBeGreaterThanOrEqual(OPS_PER_SECOND);
    // Another organisation of the same user is not touched.
    const other = await api.token({ sub: 'fast', orgs: ['org-fast', 'org-fast-2'] });
    const answer = await overHttp(POSTS.replace('ORG', 'org-fast-2'), other);
    expect(answer.status).toBe(200);
  });

  it("refuses the same way on Yoga's own pipeline", async () => {
    const token = await api.token({ sub: 'yoga', orgs: ['org-yoga'] });
    const { refusal } = await untilRefused(() => api.graphql(POSTS.replace('ORG', 'org-yoga'), {}, token));
    expectRateLimited(refusal, 'operationsPerSecond');
  });

  it("answers a refusal on the fast path exactly as Yoga's pipeline does: status, headers and body", async () => {
    const token = await api.token({ sub: 'same', orgs: ['org-same'] });
    const query = POSTS.replace('ORG', 'org-same');
    const { refusal: fast } = await untilRefused(() => overHttp(query, token));
    // The same refused operation once more, through Yoga's own pipeline (the in-process fetch).
    const viaYoga = await api.graphql(query, {}, token);
    for (const answer of [fast, viaYoga]) expectRateLimited(answer, 'operationsPerSecond');
    expect(fast.status).toBe(viaYoga.status);
    expect(fast.headers.get('content-type')).toBe(viaYoga.headers.get('content-type'));
    expect(fast.headers.get('retry-after')).toBe(viaYoga.headers.get('retry-after'));
    // retryAfterMs (and the message naming it) differ by the milliseconds between the two.
    const shape = (answer: GraphQLResponse) =>
      JSON.parse(
        JSON.stringify(answer.body)
          .replace(/retry in \d+ ms/, 'retry in N ms')
          .replace(/"retryAfterMs":\d+/, '"retryAfterMs":0'),
      );
    expect(JSON.stringify(shape(fast))).toBe(JSON.stringify(shape(viaYoga)));
  });

  it('counts an operation naming an organisation the caller is not in against the caller, not that organisation', async () => {
    const intruder = await api.token({ sub: 'intruder', orgs: ['org-intruder'] });
    const member = await api.token({ sub: 'member', orgs: ['org-victim'] });
    const { refusal } = await untilRefused(async () => {
      const answer = await overHttp(POSTS.replace('ORG', 'org-victim'), intruder);
      // FORBIDDEN (200 with an error) until the intruder's own quota refuses it.
      if (answer.status === 200) expect(answer.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN');
      return answer.status === 200 ? { ...answer, body: { data: {} } } : answer;
    });
    expectRateLimited(refusal, 'operationsPerSecond');
    expect((await overHttp(POSTS.replace('ORG', 'org-victim'), member)).status).toBe(200);
  });

  it('counts refusals per quota in herald_tenant_refusals_total, without an organisation label', async () => {
    const metrics = await (await api.fetch('/metrics')).text();
    const line = metrics
      .split('\n')
      .find((row) => row.startsWith('herald_tenant_refusals_total{quota="operationsPerSecond"}'));
    expect(Number(line?.split(' ')[1])).toBeGreaterThanOrEqual(3);
    expect(metrics).not.toMatch(/herald_tenant_refusals_total\{[^}]*org/);
  });
});

describe('publishesPerSecond', () => {
  it('refuses publishPost past the quota with RATE_LIMITED and commits nothing for it', async () => {
    const token = await api.token({ sub: 'publisher', orgs: ['org-pub'] });
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const created = await api.graphql(
        'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
        { input: { orgId: 'org-pub', title: `draft ${i}` } },
        token,
      );
      ids.push(created.body.data.createPost.id);
    }
    const answers = await Promise.all(
      ids.map((id) => api.graphql('mutation($id: ID!) { publishPost(id: $id) { id status } }', { id }, token)),
    );
    const refused = ids.filter((_, i) => answers[i]!.status === 429);
    expect(refused.length).toBeGreaterThan(0);
    for (const answer of answers) {
      if (answer.status === 429) expectRateLimited(answer, 'publishesPerSecond');
      else expect(answer.body.data.publishPost.status).toBe('PUBLISHED');
    }
    const { db } = api.app.database;
    const rows = await db.selectFrom('posts').select(['id', 'status']).where('id', 'in', refused).execute();
    expect(rows.map((row) => row.status)).toEqual(refused.map(() => 'DRAFT'));
    const outbox = await db.selectFrom('webhook_outbox').select('body').execute();
    const announced = outbox.map((row) => JSON.parse(row.body).data?.id);
    for (const id of refused) expect(announced).not.toContain(id);
  });
});

describe('WebSocket', () => {
  it('refuses a subscribe past the subscriptions quota with an error message and keeps the socket', async () => {
    const token = await api.token({ sub: 'subscriber', orgs: ['org-subs'] });
    const raw = await openAckedSocket(wsUrl, { authToken: token });
    const subscribe = (id: string) =>
      raw.send({ id, type: 'subscribe', payload: { query: SUBSCRIBE, variables: { orgId: 'org-subs' } } });
    subscribe('1');
    subscribe('2');
    subscribe('3');
    const error = await raw.next('error');
    expect(error.id).toBe('3');
    expect(error.payload[0].extensions).toEqual({ code: 'SUBSCRIPTION_LIMIT_EXCEEDED', limit: 'subscriptions' });
    expect(raw.socket.readyState).toBe(raw.socket.OPEN);
    // Ending one frees its place.
    raw.send({ id: '1', type: 'complete' });
    await waitForSubscriptions(1);
    subscribe('4');
    await api.createAndPublish(token, 'org-subs', 'after a place was freed');
    const next = await raw.next('next');
    expect(['2', '4']).toContain(next.id);
    const seen = new Set([next.id, (await raw.next('next')).id]);
    expect(seen).toEqual(new Set(['2', '4']));
    raw.socket.close();
  });

  it('refuses operations past the quota with RATE_LIMITED error messages and keeps the socket', async () => {
    const token = await api.token({ sub: 'chatty', orgs: ['org-chatty'] });
    const raw = await openAckedSocket(wsUrl, { authToken: token });
    // Within the 50 operations a socket may have in flight.
    const count = 45;
    for (let i = 0; i < count; i++) {
      raw.send({ id: `q${i}`, type: 'subscribe', payload: { query: POSTS.replace('ORG', 'org-chatty') } });
    }
    const error = await raw.next('error');
    expect(error.payload[0].extensions).toMatchObject({ code: 'RATE_LIMITED', limit: 'operationsPerSecond' });
    expect(error.payload[0].extensions.retryAfterMs).toBeGreaterThan(0);
    expect(error.payload[0].extensions.http).toBeUndefined();
    expect(raw.socket.readyState).toBe(raw.socket.OPEN);
    raw.socket.close();
  });

  it('closes a socket over the per-user cap with 1013 after connection_init, and admits one once another closes', async () => {
    const token = await api.token({ sub: 'many-sockets', orgs: ['org-sockets'] });
    const first = await openAckedSocket(wsUrl, { authToken: token });
    const second = await openAckedSocket(wsUrl, { authToken: token });
    const third = await openRawSocket(wsUrl);
    third.send({ type: 'connection_init', payload: { authToken: token } });
    expect((await third.closed).code).toBe(1013);
    expect(third.received.some((message) => message.type === 'connection_ack')).toBe(false);
    expect(second.socket.readyState).toBe(second.socket.OPEN);
    first.socket.close();
    await first.closed;
    const again = await openAckedSocket(wsUrl, { authToken: token });
    expect(again.socket.readyState).toBe(again.socket.OPEN);
    again.socket.close();
    second.socket.close();
  });
});

async function routeCount(route: string): Promise<number> {
  const metrics = await (await api.fetch('/metrics')).text();
  const line = metrics.split('\n').find((row) => row.startsWith(`herald_http_requests_total{route="${route}"}`));
  return Number(line?.split(' ')[1] ?? 0);
}

async function waitForSubscriptions(count: number) {
  for (let attempt = 0; attempt < 400; attempt++) {
    const metrics = await (await api.fetch('/metrics')).text();
    const line = metrics.split('\n').find((row) => row.startsWith('herald_subscriptions_active '));
    if (Number(line?.split(' ')[1]) === count) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`subscriptions never reached ${count}`);
}
