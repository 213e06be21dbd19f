import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { openAckedSocket, type RawSocket } from './testing/raw-socket.js';
import { startTestApi, type TestApi } from './testing/test-api.js';

/** Documents an attacker sends: each must be a coded refusal on both transports. */
const HOSTILE = {
  'nested inline fragments ×5000': `{ ${'... on Query { '.repeat(5_000)} me { id } ${'} '.repeat(5_000)} }`,
  'me{id} ×10,000': `{ ${'me { id } '.repeat(10_000)} }`,
  '@include ×1000': `{ me ${'@include(if: true) '.repeat(1_000)} { id } }`,
  '10k aliases': `{ ${Array.from({ length: 10_000 }, (_, i) => `a${i}: me { id }`).join(' ')} }`,
  'first: 2147483647': '{ posts(orgId: "org-a", first: 2147483647) { edges { node { id title author { name } } } } }',
};
/** With the token limit raised, the same documents reach the limit each was built to hit. */
const LIMIT_HIT_WITHOUT_TOKEN_LIMIT: Record<keyof typeof HOSTILE, string> = {
  'nested inline fragments ×5000': 'nesting',
  'me{id} ×10,000': 'cost',
  '@include ×1000': 'directives',
  '10k aliases': 'aliases',
  'first: 2147483647': 'cost',
};
const CODES = ['GRAPHQL_PARSE_FAILED', 'GRAPHQL_VALIDATION_FAILED', 'BAD_USER_INPUT'];

let api: TestApi;
let lax: TestApi;
let alice: string;

beforeAll(async () => {
  const databaseUrl = inject('databaseUrl');
  [api, lax] = await Promise.all([
    startTestApi({ databaseUrl, listen: true }),
    startTestApi({ databaseUrl, listen: true, env: { MAX_QUERY_TOKENS: '1000000' } }),
  ]);
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-a'] });
});

afterAll(() => Promise.all([api?.close(), lax?.close()]));

async function overHttp(target: TestApi, query: string) {
  const response = await fetch(`${target.baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${alice}` },
    body: JSON.stringify({ query }),
  });
  return { status: response.status, body: await response.json() };
}

/** Subscribes with `query` and returns the `error` message; fails if the socket closes instead. */
async function overWebSocket(socket: RawSocket, id: string, query: string) {
  socket.send({ id, type: 'subscribe', payload: { query } });
  const answer = await Promise.race([socket.next(), socket.closed.then((closed) => ({ closed }))]);
  expect(answer).toMatchObject({ id, type: 'error' });
  return (answer as { payload: Array<{ message: string; extensions?: Record<string, unknown> }> }).payload;
}

async function expectSocketOpen(socket: RawSocket) {
  socket.send({ type: 'ping' });
  await socket.next('pong');
}

describe.each([
  ['default limits', () => api, false],
  ['token limit raised to 1,000,000', () => lax, true],
] as const)('hostile documents, %s: a coded refusal on both transports', (_name, target, laxTokens) => {
  let socket: RawSocket;
  beforeAll(async () => {
    socket = await openAckedSocket(`${target().baseUrl!.replace('http', 'ws')}/graphql`, { authToken: alice });
  });
  afterAll(() => socket?.socket.close());

  it.each(Object.keys(HOSTILE) as Array<keyof typeof HOSTILE>)('%s', async (name) => {
    const query = HOSTILE[name];
    const http = await overHttp(target(), query);
    expect(http.status).not.toBe(500);
    expect(http.body.data ?? undefined).toBeUndefined();
    expect(http.body.errors.length).toBeGreaterThan(0);
    for (const error of http.body.errors) expect(CODES).toContain(error.extensions?.code);

    const errors = await overWebSocket(socket, name, query);
    for (const error of errors) expect(CODES).toContain(error.extensions?.code);
    await expectSocketOpen(socket);

    const limits = http.body.errors.map((error: { extensions?: { limit?: string } }) => error.extensions?.limit);
    const wsLimits = errors.map((error) => error.extensions?.limit);
    if (laxTokens) {
      expect(limits).toContain(LIMIT_HIT_WITHOUT_TOKEN_LIMIT[name]);
      expect(wsLimits).toContain(LIMIT_HIT_WITHOUT_TOKEN_LIMIT[name]);
    } else if (name !== 'first: 2147483647') {
      expect(limits).toEqual(['tokens']);
      expect(wsLimits).toEqual(['tokens']);
    }
  });

  it('after every refusal the server and the socket still serve', async () => {
    const { body } = await overHttp(target(), '{ me { id } }');
    expect(body.data.me.id).toBe('alice');
    socket.send({ id: 'ok', type: 'subscribe', payload: { query: '{ me { id } }' } });
    expect((await socket.next('next')).payload.data.me.id).toBe('alice');
  });
});

describe('each limit holds on its own', () => {
  it('the token limit refuses a cheap, shallow document past MAX_QUERY_TOKENS', async () => {
    const { body } = await overHttp(api, `{ me { ${'id '.repeat(2_100)} } }`);
    expect(body.errors[0].extensions).toMatchObject({ code: 'GRAPHQL_PARSE_FAILED', limit: 'tokens' });
    expect(body.errors[0].message).toMatch(/Token limit of 2000/);
  });

  it('first: 2147483647 is a cost refusal before any resolver runs, even on a cheap selection', async () => {
    const { body } = await overHttp(api, '{ posts(orgId: "org-a", first: 2147483647) { pageInfo { hasNextPage } } }');
    expect(body.errors[0].extensions).toMatchObject({ code: 'GRAPHQL_VALIDATION_FAILED', limit: 'cost' });
  });

  it('MAX_QUERY_DIRECTIVES is honoured: a lower limit refuses a few directives', async () => {
    const strict = await startTestApi({ databaseUrl: inject('databaseUrl'), env: { MAX_QUERY_DIRECTIVES: '2' } });
    try {
      const { body } = await strict.graphql(`{ me ${'@include(if: true) '.repeat(3)} { id } }`, {}, alice);
      expect(body.errors?.[0]?.extensions).toMatchObject({ code: 'GRAPHQL_VALIDATION_FAILED', limit: 'directives' });
    } finally {
      await strict.close();
    }
  });

  it('a cost refusal says what it is, without a misleading "Syntax Error"', async () => {
    const { body } = await overHttp(lax, HOSTILE['me{id} ×10,000']);
    const cost = body.errors.find((error: { extensions: { limit?: string } }) => error.extensions.limit === 'cost');
    expect(cost.message).toMatch(/^Query Cost limit of 5000 exceeded/);
  });
});
