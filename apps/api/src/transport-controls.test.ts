import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { openAckedSocket } from './testing/raw-socket.js';
import { startTestApi, type TestApi } from './testing/test-api.js';

/** Upper bound for reading a response that must end by itself (a live stream would not). */
const READ_LIMIT_MS = 5_000;
const SUBSCRIBE = 'subscription { postPublished(orgId: "org-a") { id title } }';
const INTROSPECTION = '{ __schema { types { name } } }';

let api: TestApi;
let production: TestApi;
let alice: string;

beforeAll(async () => {
  [api, production] = await Promise.all([
    startTestApi({ databaseUrl: inject('databaseUrl'), listen: true }),
    startTestApi({ databaseUrl: inject('databaseUrl'), listen: true, env: { NODE_ENV: 'production' } }),
  ]);
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-a'] });
});

afterAll(() => Promise.all([api?.close(), production?.close()]));

/** Sends a request to the listening server and reads the whole body, which must end on its own. */
async function request(path: string, init: RequestInit): Promise<{ status: number; type: string; text: string }> {
  const response = await fetch(`${api.baseUrl}${path}`, { ...init, signal: AbortSignal.timeout(READ_LIMIT_MS) });
  return { status: response.status, type: response.headers.get('content-type') ?? '', text: await response.text() };
}

describe('subscriptions over HTTP are refused with WEBSOCKET_REQUIRED', () => {
  const body = JSON.stringify({ query: SUBSCRIBE });
  const auth = () => ({ authorization: `Bearer ${alice}`, 'content-type': 'application/json' });

  it('server-sent events (POST, accept: text/event-stream) answer one error and end the stream', async () => {
    const published = api.createAndPublish(alice, 'org-a', 'must not stream');
    const response = await request('/graphql', {
      method: 'POST',
      headers: { ...auth(), accept: 'text/event-stream' },
      body,
    });
    await published;
    expect(response.text).toContain('WEBSOCKET_REQUIRED');
    expect(response.text).not.toContain('must not stream');
    expect(response.text).not.toContain('"data":{"postPublished"');
  });

  it('server-sent events over GET (accept: text/event-stream) are refused the same way', async () => {
    const response = await request(`/graphql?query=${encodeURIComponent(SUBSCRIBE)}`, {
      method: 'GET',
      headers: { authorization: `Bearer ${alice}`, accept: 'text/event-stream', 'x-graphql-yoga-csrf': '1' },
    });
    expect(response.text).toContain('WEBSOCKET_REQUIRED');
    expect(response.text).not.toContain('"data":{"postPublished"');
  });

  it('multipart subscriptions (accept: multipart/mixed) are refused', async () => {
    const response = await request('/graphql', {
      method: 'POST',
      headers: { ...auth(), accept: 'multipart/mixed' },
      body,
    });
    expect(response.status).toBe(400);
    expect(JSON.parse(response.text).errors[0].extensions.code).toBe('WEBSOCKET_REQUIRED');
  });

  it('a plain JSON POST of a subscription is refused with HTTP 400', async () => {
    const response = await request('/graphql', { method: 'POST', headers: auth(), body });
    expect(response.status).toBe(400);
    const errors = JSON.parse(response.text).errors;
    expect(errors).toHaveLength(1);
    expect(errors[0].extensions.code).toBe('WEBSOCKET_REQUIRED');
  });

  it('an anonymous caller gets the same refusal, and queries over SSE still run', async () => {
    const refused = await request('/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body,
    });
    expect(refused.text).toContain('WEBSOCKET_REQUIRED');
    const query = await request('/graphql', {
      method: 'POST',
      headers: { ...auth(), accept: 'text/event-stream' },
      body: JSON.stringify({ query: '{ me { id } }' }),
    });
    expect(query.text).toContain('"me":{"id":"alice"}');
  });

  it('the same subscription over WebSocket is served', async () => {
    const socket = await openAckedSocket(`${api.baseUrl!.replace('http', 'ws')}/graphql`, { authToken: alice });
    socket.send({ id: 's', type: 'subscribe', payload: { query: SUBSCRIBE } });
    // The subscribe is registered before the publish only once the server has answered something on the
    // socket: a ping/pong round trip after the subscribe message orders the two.
    socket.send({ type: 'ping' });
    await socket.next('pong');
    await api.createAndPublish(alice, 'org-a', 'over the socket');
    expect((await socket.next('next')).payload.data.postPublished.title).toBe('over the socket');
    socket.socket.close();
  });
});

describe('introspection follows GRAPHQL_INTROSPECTION on every transport', () => {
  it('in production config a WebSocket subscribe carrying __schema gets an error with a code, the socket stays open', async () => {
    const url = `${production.baseUrl!.replace('http', 'ws')}/graphql`;
    const socket = await openAckedSocket(url);
    socket.send({ id: 'i', type: 'subscribe', payload: { query: INTROSPECTION } });
    const error = await socket.next('error');
    expect(error.id).toBe('i');
    expect(error.payload[0].extensions.code).toBe('GRAPHQL_VALIDATION_FAILED');
    expect(JSON.stringify(socket.received)).not.toContain('"types"');
    socket.send({ type: 'ping' });
    await socket.next('pong');
    socket.socket.close();
  });

  it('over HTTP the same document is refused in production config', async () => {
    const { body } = await production.graphql(INTROSPECTION);
    expect(body.data).toBeUndefined();
    expect(body.errors?.[0]?.extensions?.code).toBe('GRAPHQL_VALIDATION_FAILED');
  });

  it('outside production introspection answers over WebSocket', async () => {
    const socket = await openAckedSocket(`${api.baseUrl!.replace('http', 'ws')}/graphql`);
    socket.send({ id: 'i', type: 'subscribe', payload: { query: INTROSPECTION } });
    const next = await socket.next('next');
    expect(next.payload.data.__schema.types.length).toBeGreaterThan(0);
    socket.socket.close();
  });
});
