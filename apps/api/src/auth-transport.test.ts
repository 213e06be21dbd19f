import { startTestJwksServer, type TestJwksServer } from '@herald/auth/testing';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { openAckedSocket, openRawSocket } from './testing/raw-socket.js';
import { startTestApi, TEST_JWT_SECRET, type TestApi } from './testing/test-api.js';

const ME = '{ me { id } }';

let api: TestApi;
let jwks: TestJwksServer;
/** An API whose JWKS has never answered: it holds no key at all. */
let jwksDownApi: TestApi;
/** An API verifying with the JWKS that works. */
let jwksApi: TestApi;

beforeAll(async () => {
  jwks = await startTestJwksServer();
  const databaseUrl = inject('databaseUrl');
  [api, jwksApi, jwksDownApi] = await Promise.all([
    startTestApi({ databaseUrl, listen: true }),
    startTestApi({ databaseUrl, listen: true, env: { JWT_SECRET: '', JWT_JWKS_URL: jwks.url } }),
    startTestApi({
      databaseUrl,
      listen: true,
      // Nothing listens on port 9 of 127.0.0.1 (discard): connection refused.
      env: { JWT_SECRET: '', JWT_JWKS_URL: 'http://127.0.0.1:9/jwks.json' },
    }),
  ]);
});

afterAll(() => Promise.all([api?.close(), jwksApi?.close(), jwksDownApi?.close(), jwks?.stop()]));

const wsUrl = (target: TestApi) => `${target.baseUrl!.replace('http', 'ws')}/graphql`;

async function postMe(target: TestApi, token: string): Promise<Response> {
  return fetch(`${target.baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: ME }),
  });
}

describe('tokens without exp are refused like invalid ones', () => {
  let forever: string;
  beforeAll(async () => {
    forever = await new SignJWT({ orgs: ['org-a'] })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('alice')
      .sign(new TextEncoder().encode(TEST_JWT_SECRET));
  });

  it('HTTP: 401 UNAUTHENTICATED', async () => {
    const response = await postMe(api, forever);
    expect(response.status).toBe(401);
    expect((await response.json()).errors[0].extensions.code).toBe('UNAUTHENTICATED');
  });

  it('WebSocket: connection_init with it is closed with 4403', async () => {
    const socket = await openRawSocket(wsUrl(api));
    socket.send({ type: 'connection_init', payload: { authToken: forever } });
    expect((await socket.closed).code).toBe(4403);
  });

  it('the tokens the test API and the dev credentials sign carry exp and work', async () => {
    const token = await api.token({ sub: 'alice', orgs: ['org-a'] });
    expect((await postMe(api, token)).status).toBe(200);
  });
});

describe('JWKS outage is AUTH_UNAVAILABLE, never an invalid token', () => {
  it('a JWKS-signed token verifies while the JWKS answers', async () => {
    const response = await postMe(jwksApi, await jwks.sign({ sub: 'alice', orgs: ['org-a'] }));
    expect(response.status).toBe(200);
    expect((await response.json()).data.me.id).toBe('alice');
  });

  it('HTTP: 503 with code AUTH_UNAVAILABLE and Retry-After when the JWKS cannot be reached', async () => {
    const response = await postMe(jwksDownApi, await jwks.sign({ sub: 'alice', orgs: ['org-a'] }));
    expect(response.status).toBe(503);
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThan(0);
    const body = await response.json();
    expect(body.errors[0].extensions.code).toBe('AUTH_UNAVAILABLE');
    expect(body.data ?? null).toBeNull();
  });

  it('WebSocket: connection_init is closed with 1013 Try Again Later, not 4403', async () => {
    const socket = await openRawSocket(wsUrl(jwksDownApi));
    socket.send({ type: 'connection_init', payload: { authToken: await jwks.sign({ sub: 'alice' }) } });
    const closed = await socket.closed;
    expect(closed.code).toBe(1013);
    expect(closed.reason).toMatch(/Try Again Later/);
  });

  it('WebSocket: credentials in operation headers get an AUTH_UNAVAILABLE error, the socket stays open', async () => {
    const socket = await openAckedSocket(wsUrl(jwksDownApi));
    const token = await jwks.sign({ sub: 'alice', orgs: ['org-a'] });
    socket.send({
      id: 'o',
      type: 'subscribe',
      payload: { query: ME, extensions: { headers: { authorization: `Bearer ${token}` } } },
    });
    expect((await socket.next('error')).payload[0].extensions.code).toBe('AUTH_UNAVAILABLE');
    socket.send({ type: 'ping' });
    await socket.next('pong');
    socket.socket.close();
  });

  it('anonymous requests keep working while the JWKS is down', async () => {
    const response = await fetch(`${jwksDownApi.baseUrl}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: ME }),
    });
    expect((await response.json()).data.me).toBeNull();
  });

  it('a JWKS answering 503 after keys were fetched: tokens keep verifying with the cached keys', async () => {
    const token = await jwks.sign({ sub: 'bob', orgs: ['org-b'] });
    expect((await postMe(jwksApi, await jwks.sign({ sub: 'alice' }))).status).toBe(200);
    jwks.mode = 'error';
    try {
      const response = await postMe(jwksApi, token);
      expect(response.status).toBe(200);
      expect((await response.json()).data.me.id).toBe('bob');
    } finally {
      jwks.mode = 'ok';
    }
  });
});
