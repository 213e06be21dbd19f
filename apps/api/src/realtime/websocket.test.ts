import { once } from 'node:events';
import { type Client, createClient } from 'graphql-ws';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { WebSocket } from 'ws';
import { openAckedSocket, openRawSocket } from '../testing/raw-socket.js';
import { startTestApi, type TestApi } from '../testing/test-api.js';
import { MAX_SUBSCRIPTIONS_PER_SOCKET } from './websocket.js';
import { MESSAGE_TOO_BIG_CLOSE_CODE } from './ws-message-limits.js';

const SUBSCRIBE =
  'subscription($orgId: ID!, $tags: [String!]) { postPublished(orgId: $orgId, tags: $tags) { id title tags author { name } } }';

let api: TestApi;
let wsUrl: string;
let alice: string; // org-a
let bob: string; // org-b

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl'), listen: true, env: { WS_KEEPALIVE_MS: '300' } });
  wsUrl = `${api.baseUrl!.replace('http', 'ws')}/graphql`;
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-a'] });
  bob = await api.token({ sub: 'bob', name: 'Bob', orgs: ['org-b'] });
});

afterAll(() => api.close());

/** Creates and publishes a post over HTTP; returns its id. */
const publish = (token: string, orgId: string, title: string, tags: string[] = []) =>
  api.createAndPublish(token, orgId, title, tags);

describe('graphql-transport-ws close codes', () => {
  it('refuses the legacy subscriptions-transport-ws sub-protocol: the handshake selects none', async () => {
    await expect(openRawSocket(wsUrl, { protocol: 'graphql-ws' })).rejects.toThrow(/no subprotocol/);
  });

  it('4406 for a socket without the graphql-transport-ws sub-protocol', async () => {
    const raw = await openRawSocket(wsUrl, { protocol: [] });
    expect((await raw.closed).code).toBe(4406);
  });

  it('4408 when connection_init does not arrive within 3 s', async () => {
    const raw = await openRawSocket(wsUrl);
    expect((await raw.closed).code).toBe(4408);
  });

  it('4401 for subscribe before connection_ack', async () => {
    const raw = await openRawSocket(wsUrl);
    raw.send({ id: '1', type: 'subscribe', payload: { query: '{ me { id } }' } });
    expect((await raw.closed).code).toBe(4401);
  });

  it('4429 for a second connection_init', async () => {
    const raw = await openAckedSocket(wsUrl);
    raw.send({ type: 'connection_init' });
    expect((await raw.closed).code).toBe(4429);
  });

  it('4409 for a duplicate subscription id', async () => {
    const raw = await openAckedSocket(wsUrl, { authToken: alice });
    const subscribe = { id: 'same', type: 'subscribe', payload: { query: SUBSCRIBE, variables: { orgId: 'org-a' } } };
    raw.send(subscribe);
    raw.send(subscribe);
    expect((await raw.closed).code).toBe(4409);
  });

  it('4400 for a message that is not a protocol message', async () => {
    const raw = await openAckedSocket(wsUrl);
    raw.send('{"type":"nonsense"}');
    expect((await raw.closed).code).toBe(4400);
    const garbled = await openAckedSocket(wsUrl);
    garbled.send('not json');
    expect((await garbled.closed).code).toBe(4400);
  });

  it('4403 for an invalid token at connection_init', async () => {
    const raw = await openRawSocket(wsUrl);
    raw.send({ type: 'connection_init', payload: { authToken: 'not-a-token' } });
    expect(await raw.closed).toEqual({ code: 4403, reason: 'Forbidden' });
  });

  it('4403 for a malformed authorization connection param', async () => {
    const raw = await openRawSocket(wsUrl);
    raw.send({ type: 'connection_init', payload: { authorization: `Token ${alice}` } });
    expect((await raw.closed).code).toBe(4403);
  });

  it('1009 for a message over 1 MiB', async () => {
    const raw = await openAckedSocket(wsUrl);
    raw.send({ id: 'big', type: 'subscribe', payload: { query: `{ me { id } } #${'x'.repeat(1024 * 1024)}` } });
    expect((await raw.closed).code).toBe(MESSAGE_TOO_BIG_CLOSE_CODE);
    expect(MESSAGE_TOO_BIG_CLOSE_CODE).toBe(1009);
  });
});

describe('ping and keep-alive', () => {
  it('answers a protocol ping with pong', async () => {
    const raw = await openAckedSocket(wsUrl);
    raw.send({ type: 'ping', payload: { at: 1 } });
    expect(await raw.next('pong')).toEqual({ type: 'pong', payload: { at: 1 } });
    raw.socket.close();
  });

  it('keeps a socket that answers WebSocket pings, and drops one that does not', async () => {
    const healthy = await openAckedSocket(wsUrl);
    const silent = await openRawSocket(wsUrl, { autoPong: false });
    silent.send({ type: 'connection_init' });
    await silent.next('connection_ack');
    let pings = 0;
    silent.socket.on('ping', () => pings++);
    // The keep-alive interval is 300 ms in this file: a missed pong is noticed within two intervals.
    expect((await silent.closed).code).toBe(1006);
    expect(pings).toBeGreaterThan(0);
    expect(healthy.socket.readyState).toBe(WebSocket.OPEN);
    healthy.send({ type: 'ping' });
    await healthy.next('pong');
    healthy.socket.close();
  });
});

describe('subscribe outcomes', () => {
  it('a document that does not validate gets an error message and no stream', async () => {
    const raw = await openAckedSocket(wsUrl, { authToken: alice });
    raw.send({
      id: 'v',
      type: 'subscribe',
      payload: { query: 'subscription { postPublished(orgId: "org-a") { nope } }' },
    });
    const error = await raw.next('error');
    expect(error.id).toBe('v');
    expect(error.payload[0].extensions.code).toBe('GRAPHQL_VALIDATION_FAILED');
    await publish(alice, 'org-a', 'after validation error');
    // The same id can be reused: no stream was ever registered under it.
    raw.send({
      id: 'v',
      type: 'subscribe',
      payload: { query: 'subscription { postPublished(orgId: "org-a") { title } }' },
    });
    // Publishes until the new subscription is live (it is once its stream listens): a bound, not a timing.
    let next: any;
    for (let attempt = 0; attempt < 20 && next === undefined; attempt++) {
      await publish(alice, 'org-a', 'reused id');
      next = await raw.next('next', 500).catch(() => undefined);
    }
    expect(next?.payload.data.postPublished.title).toBe('reused id');
    raw.socket.close();
  });

  it('complete stops further next messages for that id', async () => {
    const raw = await openAckedSocket(wsUrl, { authToken: alice });
    raw.send({
      id: 'c',
      type: 'subscribe',
      payload: { query: 'subscription { postPublished(orgId: "org-a") { title } }' },
    });
    raw.send({
      id: 'keep',
      type: 'subscribe',
      payload: { query: 'subscription { postPublished(orgId: "org-a") { title } }' },
    });
    await waitForActiveSubscriptions(2);
    await publish(alice, 'org-a', 'first');
    expect((await raw.next('next')).payload.data.postPublished.title).toBe('first');
    await raw.next('next');
    raw.send({ id: 'c', type: 'complete' });
    await waitForActiveSubscriptions(1);
    await publish(alice, 'org-a', 'second');
    const next = await raw.next('next');
    expect(next).toMatchObject({ id: 'keep', payload: { data: { postPublished: { title: 'second' } } } });
    expect(raw.received.filter((message) => message.id === 'c' && message.type === 'next')).toHaveLength(1);
    raw.socket.close();
  });

  it(`allows ${MAX_SUBSCRIPTIONS_PER_SOCKET} subscriptions per socket; the next one gets an error and the socket stays up`, async () => {
    const raw = await openAckedSocket(wsUrl, { authToken: alice });
    for (let i = 0; i < MAX_SUBSCRIPTIONS_PER_SOCKET; i++) {
      raw.send({
        id: `s${i}`,
        type: 'subscribe',
        payload: { query: 'subscription { postPublished(orgId: "org-a") { id } }' },
      });
    }
    raw.send({
      id: 'one-too-many',
      type: 'subscribe',
      payload: { query: 'subscription { postPublished(orgId: "org-a") { id } }' },
    });
    const error = await raw.next('error');
    expect(error.id).toBe('one-too-many');
    expect(error.payload[0].extensions.code).toBe('SUBSCRIPTION_LIMIT_EXCEEDED');
    await publish(alice, 'org-a', 'still served');
    const nexts = new Set<string>();
    while (nexts.size < MAX_SUBSCRIPTIONS_PER_SOCKET) nexts.add((await raw.next('next')).id);
    expect(nexts.has('one-too-many')).toBe(false);
    expect(raw.socket.readyState).toBe(WebSocket.OPEN);
    raw.socket.close();
  });
});

describe('auth on sockets', () => {
  it('a socket without a token is acknowledged, and its subscribe is refused with UNAUTHENTICATED', async () => {
    const raw = await openAckedSocket(wsUrl);
    raw.send({
      id: 'anon',
      type: 'subscribe',
      payload: { query: 'subscription { postPublished(orgId: "org-a") { id } }' },
    });
    const refusal = await raw.next();
    const errors = refusal.type === 'error' ? refusal.payload : refusal.payload.errors;
    expect(errors[0].extensions.code).toBe('UNAUTHENTICATED');
    if (refusal.type === 'next') expect((await raw.next()).type).toBe('complete');
    expect(raw.socket.readyState).toBe(WebSocket.OPEN);
    raw.socket.close();
  });

  it('subscribing to a foreign org is FORBIDDEN and nothing of it ever arrives', async () => {
    const raw = await openAckedSocket(wsUrl, { authorization: `Bearer ${alice}` });
    raw.send({
      id: 'spy',
      type: 'subscribe',
      payload: { query: 'subscription { postPublished(orgId: "org-b") { id title } }' },
    });
    const refusal = await raw.next();
    const errors = refusal.type === 'error' ? refusal.payload : refusal.payload.errors;
    expect(errors[0].extensions.code).toBe('FORBIDDEN');
    await publish(bob, 'org-b', 'org-b secret');
    raw.send({ type: 'ping' });
    await raw.next('pong');
    expect(JSON.stringify(raw.received)).not.toContain('org-b secret');
    raw.socket.close();
  });

  it('an anonymous socket may send credentials with an operation (extensions.headers, as GraphiQL does)', async () => {
    const raw = await openAckedSocket(wsUrl);
    raw.send({
      id: 'g',
      type: 'subscribe',
      payload: {
        query: 'subscription { postPublished(orgId: "org-a") { title } }',
        extensions: { headers: { Authorization: `Bearer ${alice}` } },
      },
    });
    await waitForActiveSubscriptions(1);
    await publish(alice, 'org-a', 'via operation headers');
    expect((await raw.next('next')).payload.data.postPublished.title).toBe('via operation headers');
    raw.socket.close();
  });

  it('refuses an invalid token in operation headers with UNAUTHENTICATED and keeps the socket', async () => {
    const raw = await openAckedSocket(wsUrl);
    raw.send({
      id: 'bad',
      type: 'subscribe',
      payload: {
        query: 'subscription { postPublished(orgId: "org-a") { title } }',
        extensions: { headers: { authorization: 'Bearer nope' } },
      },
    });
    const error = await raw.next('error');
    expect(error.payload[0].extensions.code).toBe('UNAUTHENTICATED');
    raw.send({ type: 'ping' });
    await raw.next('pong');
    raw.socket.close();
  });

  it('ignores operation headers on a socket that authenticated at connection_init', async () => {
    const raw = await openAckedSocket(wsUrl, { authToken: alice });
    raw.send({
      id: 'swap',
      type: 'subscribe',
      payload: {
        query: 'subscription { postPublished(orgId: "org-b") { title } }',
        extensions: { headers: { authorization: `Bearer ${bob}` } },
      },
    });
    const refusal = await raw.next();
    const errors = refusal.type === 'error' ? refusal.payload : refusal.payload.errors;
    expect(errors[0].extensions.code).toBe('FORBIDDEN');
    raw.socket.close();
  });

  it('closes the socket with 4403 "Forbidden: token expired" when the token expires', async () => {
    const shortLived = await api.token(
      { sub: 'alice', orgs: ['org-a'] },
      { expiresIn: Math.floor(Date.now() / 1000) + 2 },
    );
    const raw = await openAckedSocket(wsUrl, { authToken: shortLived });
    raw.send({
      id: 'x',
      type: 'subscribe',
      payload: { query: 'subscription { postPublished(orgId: "org-a") { id } }' },
    });
    expect(await raw.closed).toEqual({ code: 4403, reason: 'Forbidden: token expired' });
  });
});

describe('postPublished delivery (real graphql-ws client)', () => {
  const clients: Client[] = [];
  // Each test starts from no live subscription, so "wait for N active" means this test's N, never a
  // previous test's streams still counted (which would let a publish race ahead of the subscribe).
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((client) => client.dispose()));
    const deadline = Date.now() + 5_000;
    while (((await api.app.metrics.activeSubscriptions.get()).values[0]?.value ?? 0) > 0) {
      if (Date.now() > deadline) throw new Error('subscriptions of the previous test are still active');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  });

  function subscribe(token: string, variables: Record<string, unknown>, query = SUBSCRIBE) {
    const client = createClient({
      url: wsUrl,
      webSocketImpl: WebSocket,
      connectionParams: { authToken: token },
      retryAttempts: 0,
    });
    clients.push(client);
    const iterator = client.iterate({ query, variables })[Symbol.asyncIterator]();
    return {
      async next() {
        const { value } = await iterator.next();
        return value as { data: any; errors?: unknown };
      },
    };
  }

  it('delivers every post without tags, only tag-sharing posts with tags, and never another org', async () => {
    const all = subscribe(alice, { orgId: 'org-a' });
    const tagged = subscribe(alice, { orgId: 'org-a', tags: ['a', 'b'] });
    const other = subscribe(bob, { orgId: 'org-b' });
    await waitForActiveSubscriptions(3);
    const directBefore = api.app.webSockets.directFrames;

    await publish(alice, 'org-a', 'untagged');
    await publish(alice, 'org-a', 'tagged c', ['c']);
    await publish(alice, 'org-a', 'tagged b', ['b', 'z']);
    await publish(bob, 'org-b', 'bob news');

    expect((await all.next()).data.postPublished.title).toBe('untagged');
    expect((await all.next()).data.postPublished.title).toBe('tagged c');
    expect((await all.next()).data.postPublished).toMatchObject({
      title: 'tagged b',
      tags: ['b', 'z'],
      author: { name: 'Alice' },
    });
    expect((await tagged.next()).data.postPublished.title).toBe('tagged b');
    expect((await other.next()).data.postPublished.title).toBe('bob news');
    // Each of the five frames took the direct path (ws-direct-frames.ts), not ws.send.
    expect(api.app.webSockets.directFrames - directBefore).toBe(5);
  });

  it('runs each event as a fresh execution: an author renamed between events shows the new name', async () => {
    const stream = subscribe(alice, { orgId: 'org-a' });
    await waitForActiveSubscriptions(1);
    await publish(alice, 'org-a', 'before rename');
    expect((await stream.next()).data.postPublished.author.name).toBe('Alice');
    const renamed = await api.token({ sub: 'alice', name: 'Alice Renamed', orgs: ['org-a'] });
    await publish(renamed, 'org-a', 'after rename');
    expect((await stream.next()).data.postPublished.author.name).toBe('Alice Renamed');
  });

  it('an event arrives only once the post is committed: it is readable over HTTP as published', async () => {
    const stream = subscribe(
      alice,
      { orgId: 'org-a' },
      'subscription($orgId: ID!) { postPublished(orgId: $orgId) { id } }',
    );
    await waitForActiveSubscriptions(1);
    const id = await publish(alice, 'org-a', 'committed');
    const event = await stream.next();
    expect(event.data.postPublished.id).toBe(id);
    const read = await api.graphql('query($id: ID!) { post(id: $id) { status } }', { id }, alice);
    expect(read.body.data.post.status).toBe('PUBLISHED');
  });
});

describe('metrics', () => {
  it('counts sockets, subscriptions, published and delivered events without per-org labels', async () => {
    const raw = await openAckedSocket(wsUrl, { authToken: alice });
    raw.send({
      id: 'm',
      type: 'subscribe',
      payload: { query: 'subscription { postPublished(orgId: "org-a") { id } }' },
    });
    await waitForActiveSubscriptions(1);
    await publish(alice, 'org-a', 'metered');
    await raw.next('next');
    const text = await (await api.fetch('/metrics')).text();
    expect(metric(text, 'herald_ws_open_sockets')).toBeGreaterThanOrEqual(1);
    expect(metric(text, 'herald_subscriptions_active')).toBeGreaterThanOrEqual(1);
    expect(metric(text, 'herald_events_published_total')).toBeGreaterThanOrEqual(1);
    expect(metric(text, 'herald_events_delivered_total')).toBeGreaterThanOrEqual(1);
    expect(metric(text, 'herald_event_to_send_seconds_count')).toBeGreaterThanOrEqual(1);
    expect(text).not.toContain('org-a');
    raw.socket.close();
  });
});

describe('shutdown', () => {
  it('turns readiness off at once but lets an in-flight HTTP request finish', async () => {
    const { request } = await import('node:http');
    const other = await startTestApi({ databaseUrl: inject('databaseUrl'), listen: true });
    const token = await other.token({ sub: 'late', orgs: ['o'] });
    const body = JSON.stringify({ query: '{ me { id } }' });
    // The server has the request's headers (it is in flight) before shutdown begins, however slow the machine.
    const arrived = once(other.app.httpServer, 'request');
    const response = new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = request(
        `${other.baseUrl}/graphql`,
        { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` } },
        (res) => {
          let text = '';
          res.setEncoding('utf8').on('data', (chunk) => {
            text += chunk;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        },
      );
      req.on('error', reject);
      // Half the body now, the rest after shutdown has begun: the request is in flight throughout.
      req.write(body.slice(0, 10));
      setTimeout(() => req.end(body.slice(10)), 300);
    });
    await arrived;
    const stopped = other.app.stop();
    expect(other.app.draining).toBe(true);
    expect((await other.fetch('/readiness')).status).toBe(503);
    const finished = await response;
    expect(finished.status).toBe(200);
    expect(JSON.parse(finished.text)).toEqual({ data: { me: { id: 'late' } } });
    await stopped;
    await other.close();
  });

  it('closes open sockets with 1012 so clients reconnect elsewhere', async () => {
    const other = await startTestApi({ databaseUrl: inject('databaseUrl'), listen: true });
    const raw = await openAckedSocket(`${other.baseUrl!.replace('http', 'ws')}/graphql`);
    const stopped = other.close();
    expect((await raw.closed).code).toBe(1012);
    await stopped;
  });
});

function metric(text: string, name: string): number {
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : Number.NaN;
}

/** Waits (bounded) until this server streams exactly `count` more subscriptions than idle ones. */
async function waitForActiveSubscriptions(atLeast: number): Promise<void> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const value = (await api.app.metrics.activeSubscriptions.get()).values[0]?.value ?? 0;
    if (value >= atLeast) return;
    if (Date.now() > deadline) throw new Error(`only ${value} active subscriptions, wanted ${atLeast}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
