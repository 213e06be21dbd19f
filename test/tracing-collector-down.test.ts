import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { signToken } from '@herald/auth';
import { createTestSchema, type TestSchema } from '@herald/testing';
import { waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { postGraphql } from './support/graphql-http.js';
import { type OtlpReceiver, startOtlpReceiver } from './support/otlp-receiver.js';
import { readMetric } from './support/subscribers.js';
import { createPostPublishedEndpoint } from './support/webhooks.js';

// Tracing must never cost a request its answer: a collector answering 500, then gone altogether, leaves
// every request served (each bounded by the helper's hang timeout, no timing asserted) and the lost spans
// counted. And with no OTLP endpoint configured, no SDK runs at all: webhook POSTs carry no traceparent,
// logs no trace ids, and the dropped-spans metric does not exist. Both pods run in single mode
// (PostgreSQL, the webhook dispatcher in process), each on its own schema.

const JWT_SECRET = 'tracing-down-test-secret-0123456789ab';
const ORG = `org-${randomUUID()}`;
const PUBLISHES = 5;

interface Pod {
  schema: TestSchema;
  api: ApiProcess;
  receiver: Server;
  webhookHeaders: IncomingHttpHeaders[];
}

let collector: OtlpReceiver;
let traced: Pod;
let untraced: Pod;
let token: string;

async function startPod(otel: Record<string, string>): Promise<Pod> {
  const schema = await createTestSchema(inject('databaseUrl'));
  const webhookHeaders: IncomingHttpHeaders[] = [];
  const receiver = createServer((request, response) => {
    webhookHeaders.push(request.headers);
    request.resume();
    request.on('end', () => response.writeHead(204).end());
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const api = await startApiProcess({
    DATABASE_URL: schema.url,
    JWT_SECRET,
    WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
    ...otel,
  });
  const { port } = receiver.address() as { port: number };
  await createPostPublishedEndpoint(api.baseUrl, token, ORG, `http://127.0.0.1:${port}/hook`);
  return { schema, api, receiver, webhookHeaders };
}

async function stopPod(pod: Pod | undefined) {
  if (!pod) return;
  await pod.api.stop('SIGTERM');
  await new Promise((resolve) => pod.receiver.close(resolve));
  await pod.schema.drop();
}

/** Creates and publishes `count` posts; every request must be answered with data. */
async function publishPosts(pod: Pod, count: number, title: string): Promise<void> {
  for (let i = 0; i < count; i++) {
    const created = await postGraphql(
      pod.api.baseUrl,
      token,
      'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
      { input: { orgId: ORG, title: `${title} ${i}` } },
    );
    expect(created.status).toBe(200);
    const published = await postGraphql(
      pod.api.baseUrl,
      token,
      'mutation($id: ID!) { publishPost(id: $id) { status } }',
      { id: created.body.data.createPost.id },
    );
    expect(published.body).toEqual({ data: { publishPost: { status: 'PUBLISHED' } } });
  }
}

beforeAll(async () => {
  token = await signToken(JWT_SECRET, { sub: 'writer', name: 'Writer', orgs: [ORG] });
  collector = await startOtlpReceiver();
  collector.answer = 500;
  [traced, untraced] = await Promise.all([
    startPod({
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${collector.url}/v1/traces`,
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '100',
      // A refused connection is retried within this bound, then the batch counts as lost.
      OTEL_EXPORTER_OTLP_TIMEOUT: '1000',
    }),
    startPod({}),
  ]);
}, 180_000);

afterAll(async () => {
  await Promise.all([stopPod(traced), stopPod(untraced)]);
  await collector?.close();
});

describe('a collector that fails', () => {
  it('answering 500: requests are served and the refused spans are counted', async () => {
    await publishPosts(traced, PUBLISHES, 'refused');
    await waitFor('the refused spans to be counted', async () => {
      return (await readMetric(traced.api.baseUrl, 'herald_trace_spans_dropped_total')) > 0;
    });
    expect(collector.requests.length).toBeGreaterThan(0);
    expect(collector.requests.every((type) => type === 'application/json')).toBe(true);
    expect(collector.spans).toEqual([]);
    // The webhooks went out all the same, each in a trace.
    await waitFor('the webhooks', () => traced.webhookHeaders.length >= PUBLISHES);
    expect(
      traced.webhookHeaders.every((headers) => /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/.test(String(headers.traceparent))),
    ).toBe(true);
  });

  it('gone altogether: requests are served and the lost spans are counted', async () => {
    const before = await readMetric(traced.api.baseUrl, 'herald_trace_spans_dropped_total');
    await collector.close();
    await publishPosts(traced, PUBLISHES, 'unreachable');
    await waitFor(
      'the lost spans to be counted',
      async () => (await readMetric(traced.api.baseUrl, 'herald_trace_spans_dropped_total')) > before,
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    // Still serving.
    const me = await postGraphql(traced.api.baseUrl, token, '{ me { id } }');
    expect(me.body).toEqual({ data: { me: { id: 'writer' } } });
  });
});

describe('no OTLP endpoint', () => {
  it('starts no SDK: no traceparent on webhook POSTs, no trace ids in logs, no dropped-spans metric', async () => {
    await publishPosts(untraced, 1, 'untraced');
    await waitFor('the webhook', () => untraced.webhookHeaders.length >= 1);
    expect(untraced.webhookHeaders[0]?.traceparent).toBeUndefined();
    const lines = untraced.api.stdout.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(lines.find((line) => line.msg === 'herald api starting in single mode')?.tracing).toBe(false);
    expect(lines.some((line) => line.msg === 'request completed')).toBe(true);
    expect(lines.some((line) => 'trace_id' in line || 'span_id' in line)).toBe(false);
    const metrics = await (await fetch(`${untraced.api.baseUrl}/metrics`)).text();
    expect(metrics).not.toContain('herald_trace_spans_dropped_total');
  });
});
