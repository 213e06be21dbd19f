/**
 * A caller's `traceparent` is kept on every way a request body reaches the API: the fast path (body in one
 * chunk or several), the fast path handing over to Yoga (an `extensions` field), Yoga itself (another
 * `Accept`), and a chunked body. The request emitter is not bound to the trace context (that gave each
 * traced request a shape of its own, which cost node's stream code its optimisations): the fast path binds
 * its `end` listener, Yoga reads the body through promises. For flags 00 and 01 the outbox row keeps the
 * caller's trace id and flags; sampled, the publish's PostgreSQL spans are children of the request's span.
 * And untraced requests served while a traced one holds the context storage on stay out of its trace.
 */
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { signToken } from '@herald/auth';
import { createTestSchema, type TestSchema } from '@herald/testing';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { postGraphql } from './support/graphql-http.js';
import { type OtlpReceiver, startOtlpReceiver } from './support/otlp-receiver.js';

const JWT_SECRET = 'tracing-http-paths-secret-0123456789abcdef';
const ORG = `org-paths-${randomBytes(4).toString('hex')}`;
let schema: TestSchema;
let collector: OtlpReceiver;
let api: ApiProcess;
let token: string;

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  collector = await startOtlpReceiver();
  token = await signToken(JWT_SECRET, { sub: 'writer', name: 'Writer', orgs: [ORG] });
  api = await startApiProcess({
    DATABASE_URL: schema.url,
    JWT_SECRET,
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    OTEL_BSP_SCHEDULE_DELAY: '100',
    // New traces never sampled: only a caller's traceparent decides (as at a low ratio).
    OTEL_TRACES_SAMPLER: 'parentbased_always_off',
  });
}, 180_000);

afterAll(async () => {
  await api?.stop('SIGTERM');
  await collector?.close();
});

interface Send {
  method?: string;
  path?: string;
  headers: Record<string, string>;
  /** Body parts, written `gapMs` apart. */
  parts: string[];
  gapMs?: number;
  chunked?: boolean;
}

function send({
  method = 'POST',
  path = '/graphql',
  headers,
  parts,
  gapMs = 30,
  chunked,
}: Send): Promise<{ status: number; body: string }> {
  const body = parts.join('');
  return new Promise((resolve, reject) => {
    const req = request(`${api.baseUrl}${path}`, {
      method,
      headers: chunked ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) },
    });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    (async () => {
      for (const [i, part] of parts.entries()) {
        if (i > 0) await new Promise((r) => setTimeout(r, gapMs));
        req.write(part);
        if (i === 0) req.flushHeaders();
      }
      req.end();
    })();
  });
}

async function createPost(title: string): Promise<string> {
  const created = await postGraphql(
    api.baseUrl,
    token,
    'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
    {
      input: { orgId: ORG, title },
    },
  );
  return created.body.data.createPost.id;
}

async function storedTraceparent(postId: string): Promise<string | null> {
  const client = new pg.Client({ connectionString: schema.url });
  await client.connect();
  try {
    const { rows } = await client.query(
      `select traceparent from webhook_outbox where type = 'post.published' and body::json->'data'->>'id' = $1`,
      [postId],
    );
    return rows[0]?.traceparent ?? null;
  } finally {
    await client.end();
  }
}

/**
 * The spans of `traceId` the collector got, once both the server span under `callerSpan` and a
 * PostgreSQL span are among them (or after 30 s). They may come in different exports: a statement's
 * span ends, and may be sent, before the request's.
 */
async function spansWithServerAndPostgres(traceId: string, callerSpan: string) {
  const deadline = Date.now() + 30_000;
  const complete = (spans: typeof collector.spans) =>
    spans.some((s) => s.kind === 2 && s.parentSpanId === callerSpan) &&
    spans.some((s) => s.attributes['db.system.name'] === 'postgresql');
  let spans = collector.spans.filter((s) => s.traceId === traceId);
  while (Date.now() < deadline && !complete(spans)) {
    await new Promise((r) => setTimeout(r, 100));
    spans = collector.spans.filter((s) => s.traceId === traceId);
  }
  return spans;
}

type Path =
  | 'fast, one chunk'
  | 'fast, 3 chunks'
  | 'fast → Yoga (extensions)'
  | 'Yoga (graphql-response+json)'
  | 'Yoga, chunked body in 3 parts';

function requestFor(path: Path, postId: string, traceparent: string): Send {
  const query = 'mutation Publish($id: ID!) { publishPost(id: $id) { id status } }';
  const base = { 'content-type': 'application/json', authorization: `Bearer ${token}`, traceparent };
  const json = JSON.stringify(
    path === 'fast → Yoga (extensions)'
      ? { query, variables: { id: postId }, extensions: { x: 1 } }
      : { query, variables: { id: postId } },
  );
  const thirds = [json.slice(0, 20), json.slice(20, 40), json.slice(40)];
  switch (path) {
    case 'fast, one chunk':
      return { headers: base, parts: [json] };
    case 'fast, 3 chunks':
      return { headers: base, parts: thirds };
    case 'fast → Yoga (extensions)':
      return { headers: base, parts: thirds };
    case 'Yoga (graphql-response+json)':
      return { headers: { ...base, accept: 'application/graphql-response+json' }, parts: thirds };
    case 'Yoga, chunked body in 3 parts':
      return { headers: base, parts: thirds, chunked: true };
  }
}

const PATHS: Path[] = [
  'fast, one chunk',
  'fast, 3 chunks',
  'fast → Yoga (extensions)',
  'Yoga (graphql-response+json)',
  'Yoga, chunked body in 3 parts',
];

describe.each(PATHS)('%s', (path) => {
  it.each(['00', '01'])(
    'a caller traceparent with flags %s reaches the outbox (and, sampled, the spans nest)',
    async (flags) => {
      const traceId = randomBytes(16).toString('hex');
      const callerSpan = randomBytes(8).toString('hex');
      const postId = await createPost(`${path} ${flags}`);
      const answer = await send(requestFor(path, postId, `00-${traceId}-${callerSpan}-${flags}`));
      expect(answer.status, answer.body).toBe(200);
      expect(answer.body).toContain('PUBLISHED');
      const stored = await storedTraceparent(postId);
      expect(stored).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-${flags}$`));
      if (flags === '01') {
        const spans = await spansWithServerAndPostgres(traceId, callerSpan);
        const server = spans.find((s) => s.kind === 2 && s.parentSpanId === callerSpan);
        expect(server?.name).toBe('mutation Publish');
        const pgSpans = spans.filter((s) => s.attributes['db.system.name'] === 'postgresql');
        expect(pgSpans.length).toBeGreaterThan(0);
        expect(pgSpans.every((s) => s.parentSpanId === server?.spanId)).toBe(true);
        expect(stored?.split('-')[2]).toBe(server?.spanId);
      }
    },
  );
});

describe('untraced requests while another request holds the context storage on', () => {
  it('do not publish in the held operation’s trace (bindToOperation binds whatever is active then)', async () => {
    const traceId = randomBytes(16).toString('hex');
    const heldPost = await createPost('held');
    // The held request: its body trickles in over ~1.5 s, so its hold (and the storage) stays on meanwhile.
    const held = requestFor('fast, 3 chunks', heldPost, `00-${traceId}-${randomBytes(8).toString('hex')}-01`);
    const heldAnswer = send({ ...held, gapMs: 750 });
    await new Promise((r) => setTimeout(r, 100));
    const others = await Promise.all(Array.from({ length: 8 }, (_, i) => createPost(`other ${i}`)));
    await Promise.all(
      others.map((postId, i) => {
        const r = requestFor(i % 2 ? 'fast, 3 chunks' : 'Yoga (graphql-response+json)', postId, 'x');
        const { traceparent: _, ...headers } = r.headers;
        return send({ ...r, headers, gapMs: 20 });
      }),
    );
    expect((await heldAnswer).status).toBe(200);
    expect(await storedTraceparent(heldPost)).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    for (const postId of others) {
      const stored = await storedTraceparent(postId);
      expect(stored).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
      expect(stored).not.toContain(traceId);
    }
  });
});

/** A counter's value on /metrics (`herald_http_requests_total{route="compiled"}`, say). */
async function counter(series: string): Promise<number> {
  const text = await (await fetch(`${api.baseUrl}/metrics`)).text();
  const line = text.split('\n').find((one) => one.startsWith(`${series} `));
  return Number(line?.split(' ')[1] ?? 0);
}
const COMPILED = 'herald_http_requests_total{route="compiled"}';
const STORAGE_TURNED_ON = 'herald_trace_context_storage_turned_on_total';

// A query the fast path runs by its compiled form carries its operation by hand (stretches, @herald/db's
// pool from the checkout to the query) instead of holding the context storage: its spans nest all the same.
// With a root field that does not read everything in one step (`me`), the storage carries it instead.
describe.each(['fast, one chunk', 'fast, 3 chunks', 'fast, with `me` beside'] as const)('a posts query, %s', (path) => {
  it('sampled by the caller: served compiled, its PostgreSQL spans are children of the request span', async () => {
    await createPost(`page ${path}`);
    const me = path === 'fast, with `me` beside' ? ' me { id }' : '';
    const query = `query Posts($orgId: ID!) {${me} posts(orgId: $orgId, first: 10) { edges { node { id title } } } }`;
    const json = JSON.stringify({ query, variables: { orgId: ORG } });
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${token}` };
    // The first sight of a document goes through Yoga, which registers it for the fast path.
    expect((await send({ headers, parts: [json] })).status).toBe(200);
    const traceId = randomBytes(16).toString('hex');
    const callerSpan = randomBytes(8).toString('hex');
    const compiledBefore = await counter(COMPILED);
    const storageBefore = await counter(STORAGE_TURNED_ON);
    const answer = await send({
      headers: { ...headers, traceparent: `00-${traceId}-${callerSpan}-01` },
      parts: path === 'fast, 3 chunks' ? [json.slice(0, 20), json.slice(20, 40), json.slice(40)] : [json],
    });
    expect(answer.status, answer.body).toBe(200);
    expect(answer.body).toContain(`page ${path}`);
    expect(await counter(COMPILED)).toBe(compiledBefore + 1);
    // Carried by hand, the storage (Node's async hooks for every request) stays off; with `me` it is held.
    const turnedOn = (await counter(STORAGE_TURNED_ON)) - storageBefore;
    if (me) expect(turnedOn).toBeGreaterThan(0);
    else {
      // Background work (an earlier test's sampled publish fanned out) may turn it on meanwhile: of three
      // more such requests, at least one must leave the counter where it was.
      const quiet: number[] = [];
      for (let i = 0; i < 3; i++) {
        const before = await counter(STORAGE_TURNED_ON);
        const again = await send({
          headers: { ...headers, traceparent: `00-${randomBytes(16).toString('hex')}-${callerSpan}-01` },
          parts: [json],
        });
        expect(again.status).toBe(200);
        quiet.push((await counter(STORAGE_TURNED_ON)) - before);
      }
      expect(Math.min(turnedOn, ...quiet)).toBe(0);
    }
    const spans = await spansWithServerAndPostgres(traceId, callerSpan);
    const server = spans.find((s) => s.kind === 2 && s.parentSpanId === callerSpan);
    expect(server?.name).toBe('query Posts');
    const pgSpans = spans.filter((s) => s.attributes['db.system.name'] === 'postgresql');
    // The checkout (pg-pool.connect) and the page's statement.
    expect(pgSpans.map((s) => s.name)).toEqual(expect.arrayContaining(['pg-pool.connect']));
    expect(pgSpans.some((s) => String(s.attributes['db.query.text'] ?? '').includes('"posts"'))).toBe(true);
    expect(pgSpans.every((s) => s.parentSpanId === server?.spanId)).toBe(true);
  });
});

describe('a posts query answered with an error, sampled by the caller', () => {
  it("writes its access log line with the request's trace id (after Yoga's hooks ran it in the storage)", async () => {
    const query =
      'query Page($orgId: ID!, $first: Int) { posts(orgId: $orgId, first: $first) { edges { node { id } } } }';
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${token}` };
    expect(
      (await send({ headers, parts: [JSON.stringify({ query, variables: { orgId: ORG, first: 1 } })] })).status,
    ).toBe(200);
    const traceId = randomBytes(16).toString('hex');
    const compiledBefore = await counter(COMPILED);
    const answer = await send({
      headers: { ...headers, traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01` },
      parts: [JSON.stringify({ query, variables: { orgId: ORG, first: 100_000 } })],
    });
    expect(answer.body).toContain('BAD_USER_INPUT');
    expect(await counter(COMPILED)).toBe(compiledBefore + 1);
    const deadline = Date.now() + 5_000;
    const logged = () => api.stdout.find((line) => line.includes(traceId) && line.includes('request completed'));
    while (!logged() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(logged(), api.stdout.slice(-3).join('\n')).toBeDefined();
  });
});
