import { request as httpRequest } from 'node:http';
import { createTestSchema } from '@herald/testing';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from './testing/test-api.js';

/**
 * Parity of the HTTP fast path (http-fast-path.ts) with Yoga: one database, two API processes' worth of
 * servers on it, one with HTTP_FAST_PATH (the default) and one without; every request of the corpus goes
 * to both over real sockets and the answers must match (status, the headers that carry meaning, body with
 * generated ids and times blanked). Each request also names the route the fast server must have taken,
 * read from `herald_http_requests_total`, so a fast path that quietly sends everything to Yoga fails.
 */

type Route = 'compiled' | 'pipeline' | 'yoga';

interface Sent {
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  /** A JSON value (stringified) or a raw string body. */
  json?: unknown;
  body?: string;
  /** Send without Content-Length (chunked). */
  chunked?: boolean;
}

interface Answer {
  status: number;
  headers: Record<string, string | undefined>;
  body: string;
}

/** Headers whose values must match between the two servers (x-request-id is compared on its own). */
const COMPARED_HEADERS = [
  'content-type',
  'www-authenticate',
  'retry-after',
  'allow',
  'accept',
  'access-control-allow-origin',
  'access-control-allow-credentials',
  'vary',
];
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;
const ISO_TIME = /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g;
const SECRET_LIMIT_BYTES = 8_192;

let fast: TestApi;
let slow: TestApi;
let alice: string;
let expired: string;
let foreign: string;

beforeAll(async () => {
  const schema = await createTestSchema(inject('databaseUrl'));
  const env = { DATABASE_URL: schema.url, NODE_ENV: 'production', MAX_REQUEST_BODY_BYTES: String(SECRET_LIMIT_BYTES) };
  fast = await startTestApi({ listen: true, env });
  slow = await startTestApi({ listen: true, env: { ...env, HTTP_FAST_PATH: 'false' } });
  expect(fast.config.http.fastPath).toBe(true);
  expect(slow.config.http.fastPath).toBe(false);
  alice = await fast.token({ sub: 'alice', name: 'Alice', orgs: ['org-a', 'org-x'] });
  expired = await fast.token({ sub: 'alice', orgs: ['org-a'] }, { expiresIn: Math.floor(Date.now() / 1000) - 60 });
  foreign = await new SignJWT({ sub: 'alice', orgs: ['org-a'] })
    .setProtectedHeader({ alg: 'HS256' })
    .setExpirationTime('1h')
    .sign(new TextEncoder().encode('another-secret-another-secret-0123456789'));
  for (const title of ['first', 'second', 'third']) await fast.createAndPublish(alice, 'org-a', title, ['t']);
  // An invariant broken behind the API's back: a post whose author does not exist (a masked 500-class error).
  const { db } = fast.app.database;
  await db.schema.alterTable('posts').dropConstraint('posts_author_id_fkey').execute();
  await db
    .insertInto('posts')
    .values({ id: 'orphan', org_id: 'org-x', author_id: 'ghost', title: 'x', tags: [] })
    .execute();
}, 120_000);

afterAll(() => Promise.all([fast?.close(), slow?.close()]));

function send(baseUrl: string, sent: Sent): Promise<Answer> {
  const body = sent.body ?? (sent.json === undefined ? undefined : JSON.stringify(sent.json));
  const headers: Record<string, string> = { ...(sent.headers ?? {}) };
  if (body !== undefined && !sent.chunked) headers['content-length'] = String(Buffer.byteLength(body));
  return new Promise((resolve, reject) => {
    const url = new URL(sent.path ?? '/graphql', baseUrl);
    const req = httpRequest(url, { method: sent.method ?? 'POST', headers, timeout: 10_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const answerHeaders: Record<string, string | undefined> = {};
        for (const [name, value] of Object.entries(res.headers)) {
          answerHeaders[name] = Array.isArray(value) ? value.join(', ') : value;
        }
        resolve({ status: res.statusCode ?? 0, headers: answerHeaders, body: Buffer.concat(chunks).toString('utf8') });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 10 s')));
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

async function routes(api: TestApi): Promise<Record<Route, number>> {
  const { values } = await api.app.metrics.httpRequests.get();
  const count = (route: Route) => values.find((value) => value.labels.route === route)?.value ?? 0;
  return { compiled: count('compiled'), pipeline: count('pipeline'), yoga: count('yoga') };
}

/** The body with generated ids and times blanked, parsed when it is JSON. */
function normalised(body: string): unknown {
  const blanked = body.replace(UUID, '<uuid>').replace(ISO_TIME, '<time>');
  try {
    return JSON.parse(blanked);
  } catch {
    return blanked;
  }
}

/** Sends `sent` to both servers; the answers must match and the fast server must have taken `route`. */
async function expectParity(sent: Sent, route: Route): Promise<Answer> {
  const before = await routes(fast);
  const fastAnswer = await send(fast.baseUrl!, sent);
  const after = await routes(fast);
  const slowAnswer = await send(slow.baseUrl!, sent);
  const taken = (Object.keys(after) as Route[]).filter((name) => after[name] !== before[name]);
  expect(taken, `route of ${JSON.stringify(sent).slice(0, 200)}`).toEqual([route]);
  expect(fastAnswer.status).toBe(slowAnswer.status);
  for (const name of COMPARED_HEADERS) expect(fastAnswer.headers[name], name).toBe(slowAnswer.headers[name]);
  const given = sent.headers?.['x-request-id'];
  // Yoga answers some refusals before its request-id hook runs: then neither server sends one.
  expect(fastAnswer.headers['x-request-id'] === undefined).toBe(slowAnswer.headers['x-request-id'] === undefined);
  for (const answer of [fastAnswer, slowAnswer]) {
    const id = answer.headers['x-request-id'];
    if (id === undefined) continue;
    if (given && /^[\w.:-]{1,128}$/.test(given)) expect(id).toBe(given);
    else expect(id).toMatch(UUID);
  }
  expect(normalised(fastAnswer.body)).toEqual(normalised(slowAnswer.body));
  return fastAnswer;
}

const json = (query: string, variables?: unknown, operationName?: string) => ({
  query,
  ...(variables === undefined ? {} : { variables }),
  ...(operationName === undefined ? {} : { operationName }),
});
const post = (body: unknown, headers: Record<string, string> = {}): Sent => ({
  json: body,
  headers: { 'content-type': 'application/json', authorization: `Bearer ${alice}`, ...headers },
});
const POSTS =
  'query Posts($orgId: ID!, $first: Int) { posts(orgId: $orgId, first: $first) { edges { node { id title tags status author { name } } } } }';

describe('the HTTP fast path answers exactly as Yoga does', () => {
  it('queries: the first run through Yoga accepts a document, the next ones run it compiled', async () => {
    const me = await expectParity(post(json('{ me { id } }')), 'pipeline');
    expect(JSON.parse(me.body)).toEqual({ data: { me: { id: 'alice' } } });
    await expectParity(post(json('{ me { id } }')), 'compiled');
    await expectParity(post(json(POSTS, { orgId: 'org-a', first: 2 }, 'Posts')), 'pipeline');
    const page = await expectParity(post(json(POSTS, { orgId: 'org-a', first: 2 }, 'Posts')), 'compiled');
    expect(JSON.parse(page.body).data.posts.edges.map((edge: any) => edge.node.title)).toEqual(['third', 'second']);
    await expectParity(post(json(POSTS, { orgId: 'org-a' })), 'compiled');
    await expectParity(
      post(json(POSTS, { orgId: 'org-a' }, 'Posts'), { 'content-type': 'application/json; charset=utf-8' }),
      'compiled',
    );
    await expectParity(post(json(POSTS, { orgId: 'org-a' }, 'Posts'), { accept: 'application/json' }), 'compiled');
    await expectParity(post(json(POSTS, { orgId: 'org-a' }, 'Posts'), { 'x-request-id': 'trace-42.a:b' }), 'compiled');
    await expectParity(post(json(POSTS, { orgId: 'org-a' }, 'Posts'), { 'x-request-id': 'not ok!' }), 'compiled');
  });

  it('errors of an accepted query are Yoga’s: bad variables, no token, another organisation', async () => {
    await expectParity(post(json(POSTS, { orgId: 'org-a' }, 'Posts')), 'compiled');
    await expectParity(post(json(POSTS, { orgId: 'org-a', first: 'ten' }, 'Posts')), 'pipeline');
    await expectParity(post(json(POSTS, {}, 'Posts')), 'pipeline');
    await expectParity(post(json(POSTS, { orgId: 'org-a', first: 1000 }, 'Posts')), 'compiled');
    await expectParity(post(json(POSTS, { orgId: 'org-b' }, 'Posts')), 'compiled');
    await expectParity(
      { json: json(POSTS, { orgId: 'org-a' }, 'Posts'), headers: { 'content-type': 'application/json' } },
      'compiled',
    );
    await expectParity(post(json(POSTS, { orgId: 'org-a' }, 'Nope')), 'pipeline');
    await expectParity(post(json(POSTS, { orgId: 'org-a\u0000' }, 'Posts')), 'pipeline');
  });

  it('tokens: missing, malformed, expired, wrongly signed (401 with WWW-Authenticate)', async () => {
    await expectParity(post(json('{ me { id } }'), { authorization: 'Basic abc' }), 'pipeline');
    await expectParity(post(json('{ me { id } }'), { authorization: 'Bearer ' }), 'pipeline');
    await expectParity(post(json('{ me { id } }'), { authorization: `Bearer ${expired}` }), 'pipeline');
    await expectParity(post(json('{ me { id } }'), { authorization: `Bearer ${foreign}` }), 'pipeline');
    await expectParity({ json: json('{ me { id } }'), headers: { 'content-type': 'application/json' } }, 'compiled');
  });

  it('resolver errors, masked internal errors, limits and text input', async () => {
    await expectParity(post(json('{ post(id: "missing") { id } }')), 'pipeline');
    await expectParity(post(json('{ post(id: "orphan") { author { name } } }')), 'pipeline');
    await expectParity(post(json('{ post(id: "orphan") { author { name } } }')), 'compiled');
    await expectParity(post(json('{ me { id } nope }')), 'pipeline');
    await expectParity(post(json('{ me { id ')), 'pipeline');
    await expectParity(
      post(json(`{ ${Array.from({ length: 20 }, (_, i) => `a${i}: me { id }`).join(' ')} }`)),
      'pipeline',
    );
    await expectParity(post(json(`{ me { id } ${'x '.repeat(3_000)} }`)), 'pipeline');
    await expectParity(post(json('{ post(id: "a\\u0000b") { id } }')), 'pipeline');
    await expectParity(post(json('{ __schema { types { name } } }')), 'pipeline');
    // Never registered for the fast path (several operations), and each runs the operation it names.
    const two = 'query A { me { id } } query B { me { name } }';
    const b = await expectParity(post(json(two, undefined, 'B')), 'pipeline');
    expect(JSON.parse(b.body)).toEqual({ data: { me: { name: 'Alice' } } });
    const a = await expectParity(post(json(two, undefined, 'A')), 'pipeline');
    expect(JSON.parse(a.body)).toEqual({ data: { me: { id: 'alice' } } });
    await expectParity(post(json(two)), 'pipeline');
  });

  it('mutations run once, compiled once accepted, with the same answers and errors', async () => {
    const CREATE = 'mutation ($input: CreatePostInput!) { createPost(input: $input) { id title tags status } }';
    const created = await expectParity(
      post(json(CREATE, { input: { orgId: 'org-a', title: ' made ', tags: ['x'] } })),
      'pipeline',
    );
    expect(JSON.parse(created.body).data.createPost.title).toBe('made');
    await expectParity(post(json(CREATE, { input: { orgId: 'org-a', title: ' made ', tags: ['x'] } })), 'compiled');
    await expectParity(post(json(CREATE, { input: { orgId: 'org-a', title: '  ' } })), 'compiled');
    await expectParity(post(json(CREATE, { input: { orgId: 'org-b', title: 'no' } })), 'compiled');
    await expectParity(post(json(CREATE, { input: { orgId: 'org-a', title: 'nul\u0000' } })), 'pipeline');
    await expectParity(post(json('mutation { publishPost(id: "missing") { id } }')), 'pipeline');
    await expectParity(post(json('mutation { publishPost(id: "orphan") { id author { name } } }')), 'pipeline');
    await expectParity(post(json('mutation { publishPost(id: "orphan") { id author { name } } }')), 'compiled');
    await expectParity(post(json('mutation { publishPost(id: "missing") { id } }')), 'compiled');
    await expectParity(
      post(json('mutation ($input: CreatePostInput!) { createPost(input: $input) { id } }', { input: { title: 'x' } })),
      'pipeline',
    );
    const titles = await fast.graphql('{ posts(orgId: "org-a", first: 100) { edges { node { title } } } }', {}, alice);
    const made = titles.body.data.posts.edges.filter((edge: any) => edge.node.title === 'made');
    expect(made).toHaveLength(4); // two requests, each to both servers: each ran exactly once
  });

  it('Accept headers Yoga answers with application/json, and CORS answers, take the fast path', async () => {
    const me = json('{ me { id } }');
    for (const accept of [
      'application/json, text/plain, */*',
      'text/html, application/json;q=0.9',
      'application/*',
      'application/json; charset=utf-8',
      'application/json;charset=latin1, */*',
      'text/event-stream, */*',
    ]) {
      await expectParity(post(me, { accept }), 'compiled');
    }
    for (const accept of [
      'application/graphql-response+json, application/json',
      'application/json;charset=latin1',
      'text/plain',
      '',
    ]) {
      await expectParity(post(me, { accept }), 'yoga');
    }
    await expectParity(post(me, { origin: 'https://app.example' }), 'compiled');
    await expectParity(post(json('{ me { id } nope }'), { origin: 'https://app.example' }), 'pipeline');
    await expectParity(post(json(POSTS, { orgId: 'org-b' }, 'Posts'), { origin: 'http://localhost:3000' }), 'compiled');
    await expectParity(post(me, { origin: 'https://app.example', authorization: 'Bearer x.y.z' }), 'pipeline');
  });

  it('subscriptions over HTTP stay refused', async () => {
    const SUBSCRIBE = 'subscription { postPublished(orgId: "org-a") { id } }';
    await expectParity(post(json(SUBSCRIBE)), 'pipeline');
    await expectParity(post(json(SUBSCRIBE), { accept: 'text/event-stream' }), 'yoga');
    await expectParity(post(json(SUBSCRIBE), { accept: 'multipart/mixed' }), 'yoga');
  });

  it('everything else goes to Yoga untouched: GET, other shapes, types, sizes, CORS', async () => {
    const auth = { authorization: `Bearer ${alice}` };
    const query = encodeURIComponent('{ me { id } }');
    await expectParity({ method: 'GET', path: `/graphql?query=${query}`, headers: auth }, 'yoga');
    await expectParity(
      { method: 'GET', path: `/graphql?query=${query}`, headers: { ...auth, 'x-graphql-yoga-csrf': '1' } },
      'yoga',
    );
    await expectParity(
      {
        method: 'GET',
        path: '/graphql?query=mutation%7BpublishPost(id%3A%22x%22)%7Bid%7D%7D',
        headers: { ...auth, 'x-graphql-yoga-csrf': '1' },
      },
      'yoga',
    );
    await expectParity({ ...post(json('{ me { id } }')), path: '/graphql?x=1' }, 'yoga');
    await expectParity({ ...post(json('{ me { id } }')), path: '/other' }, 'yoga');
    await expectParity({ ...post(json('{ me { id } }')), method: 'PUT' }, 'yoga');
    await expectParity(post(json('{ me { id } }'), { 'content-type': 'text/plain' }), 'yoga');
    await expectParity(post(json('{ me { id } }'), { 'content-type': 'application/graphql+json' }), 'yoga');
    await expectParity(post(json('{ me { id } }'), { 'content-type': 'Application/JSON' }), 'yoga');
    await expectParity({ body: '{ me { id } }', headers: { 'content-type': 'application/graphql', ...auth } }, 'yoga');
    await expectParity(
      { body: `query=${query}`, headers: { 'content-type': 'application/x-www-form-urlencoded', ...auth } },
      'yoga',
    );
    await expectParity(post(json('{ me { id } }'), { accept: 'application/graphql-response+json' }), 'yoga');
    await expectParity(post(json('{ me { nope } }'), { accept: 'application/graphql-response+json' }), 'yoga');
    await expectParity(post(json('{ me { id } }'), { accept: 'text/html' }), 'yoga');
    await expectParity(post(json('{ me { id } }'), { origin: '*' }), 'yoga');
    await expectParity(
      post(json('{ me { id } }'), { origin: 'https://app.example', 'access-control-request-method': 'POST' }),
      'yoga',
    );
    await expectParity(
      { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } },
      'yoga',
    );
    await expectParity({ ...post(json('{ me { id } }')), chunked: true }, 'yoga');
    await expectParity(post(json(`{ me { id } } # ${'x'.repeat(SECRET_LIMIT_BYTES)}`)), 'yoga');
    // Read, then handed to Yoga with the body it read.
    await expectParity(post([json('{ me { id } }')]), 'yoga');
    await expectParity(post({ query: 1 }), 'yoga');
    await expectParity(post({ query: '{ me { id } }', variables: [1] }), 'yoga');
    await expectParity(post({ query: '{ me { id } }', operationName: 5 }), 'yoga');
    await expectParity(post({ query: '{ me { id } }', extensions: { persistedQuery: { version: 1 } } }), 'yoga');
    await expectParity(post({ query: '{ me { id } }', other: 1 }), 'yoga');
    await expectParity(post({ variables: {} }), 'yoga');
    await expectParity(post(null), 'yoga');
    await expectParity(post('{ me { id } }'), 'yoga');
    await expectParity(
      { body: '{"query": "{ me { id } }"', headers: { 'content-type': 'application/json', ...auth } },
      'yoga',
    );
    await expectParity({ body: '', headers: { 'content-type': 'application/json', ...auth } }, 'yoga');
    await expectParity(
      post({ query: '{ me { id } }', variables: null, operationName: null, extensions: null }),
      'compiled',
    );
    await expectParity({ method: 'GET', path: '/health' }, 'yoga');
  });
});
