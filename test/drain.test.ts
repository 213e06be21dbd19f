import { randomUUID } from 'node:crypto';
import { request } from 'node:http';
import { signToken } from '@herald/auth';
import { createTestSchema, type TestSchema } from '@herald/testing';
import { waitFor } from '@herald/testing/ports';
import { createClient } from 'graphql-ws';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { WebSocket } from 'ws';
import { type ApiProcess, startApiProcess } from './support/api-process.js';

// A rolling restart as a load balancer sees it: after SIGTERM the pod answers /readiness with 503 while
// it still accepts new connections and serves them (SHUTDOWN_DRAIN_DELAY_MS), so the balancer takes it
// out before it stops accepting; then WebSockets close with 1012 and the process exits with 0.

const JWT_SECRET = 'drain-test-secret-0123456789abcdef0123';
const ORG = `org-${randomUUID()}`;
/** Long enough for the checks below on a busy machine; the test never asserts a duration. */
const DRAIN_DELAY_MS = 4_000;

let schema: TestSchema;
let api: ApiProcess;
let token: string;

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  token = await signToken(JWT_SECRET, { sub: 'reader', orgs: [ORG] });
  api = await startApiProcess({
    DATABASE_URL: schema.url,
    JWT_SECRET,
    SHUTDOWN_DRAIN_DELAY_MS: String(DRAIN_DELAY_MS),
  });
}, 120_000);

afterAll(async () => {
  await api?.stop('SIGKILL');
});

/** One request on a fresh TCP connection (no keep-alive pool): proves the server still accepts. */
function freshConnection(path: string, body?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: api.port,
        path,
        method: body ? 'POST' : 'GET',
        agent: false,
        headers: body ? { 'content-type': 'application/json', authorization: `Bearer ${token}` } : {},
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8').on('data', (chunk: string) => {
          text += chunk;
        });
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('single mode (DATABASE_URL without REDIS_URL)', () => {
  it('names the mode in its first log line', () => {
    const first = JSON.parse(api.stdout[0] ?? '{}') as Record<string, unknown>;
    expect(first).toMatchObject({ msg: 'herald api starting in single mode', mode: 'single', pubsub: 'memory' });
  });
});

describe('SIGTERM drain', () => {
  it('answers /readiness 503 while still accepting and serving, then closes sockets with 1012 and exits 0', async () => {
    expect((await freshConnection('/readiness')).status).toBe(200);
    const closes: number[] = [];
    const client = createClient({
      url: `ws://127.0.0.1:${api.port}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authToken: token },
      lazy: false,
      retryAttempts: 0,
      // The close at shutdown is expected; graphql-ws would print it.
      onNonLazyError: () => {},
      on: { closed: (event) => closes.push((event as { code: number }).code) },
    });
    let connected = false;
    client.on('connected', () => {
      connected = true;
    });
    client.subscribe(
      { query: 'subscription($orgId: ID!) { postPublished(orgId: $orgId) { id } }', variables: { orgId: ORG } },
      { next: () => {}, error: () => {}, complete: () => {} },
    );
    await waitFor('the WebSocket to connect', () => connected);

    const exited = api.stop('SIGTERM');
    await waitFor('readiness 503', async () => (await freshConnection('/readiness')).status === 503);
    // Still draining: a new connection is accepted and a GraphQL request on it is served.
    const served = await freshConnection('/graphql', JSON.stringify({ query: '{ me { id } }' }));
    expect(served.status).toBe(200);
    expect(JSON.parse(served.body)).toEqual({ data: { me: { id: 'reader' } } });
    expect(closes).toEqual([]);
    expect(api.child.exitCode).toBeNull();

    expect(await exited).toBe(0);
    expect(closes).toEqual([1012]);
    await expect(freshConnection('/readiness')).rejects.toThrow(/ECONNREFUSED/);
    await client.dispose();
  });
});
