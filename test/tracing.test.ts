import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { signToken } from '@herald/auth';
import { createTestSchema, type TestSchema } from '@herald/testing';
import { waitFor } from '@herald/testing/ports';
import { createClient } from 'graphql-ws';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { WebSocket } from 'ws';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { type DispatcherProcess, startDispatcherProcess } from './support/dispatcher-process.js';
import { postGraphql } from './support/graphql-http.js';
import { type OtlpReceiver, type ReceivedSpan, startOtlpReceiver } from './support/otlp-receiver.js';
import { type Subscriber, subscribePostPublished } from './support/subscribers.js';
import { createPostPublishedEndpoint } from './support/webhooks.js';

// One publish followed through a real cluster: two API pods sharing PostgreSQL and Redis and a webhook
// dispatcher process, all exporting OTLP/protobuf to a receiver in this test. The caller's traceparent
// on publishPost must lead to one trace holding the GraphQL span (its child), the publish's PostgreSQL
// spans, the fan-out span on the OTHER pod (where the subscriber is), and the dispatcher's attempt span,
// whose traceparent the webhook receiver got on the POST.

const JWT_SECRET = 'tracing-test-secret-0123456789abcdef';
const ORG = `org-${randomUUID()}`;
/** The caller's trace: ids as a client would make them. */
const CALLER_TRACE_ID = randomBytes(16).toString('hex');
const CALLER_SPAN_ID = randomBytes(8).toString('hex');
const REDIS_PREFIX = `tracing-${randomUUID()}:`;

let schema: TestSchema;
let collector: OtlpReceiver;
let receiver: Server;
const webhookHeaders: IncomingHttpHeaders[] = [];
let publisher: ApiProcess;
let fanOutPod: ApiProcess;
let dispatcher: DispatcherProcess;
let subscriber: Subscriber | undefined;
let token: string;
/** The environment every process of this file starts with. */
let env: Record<string, string>;

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  collector = await startOtlpReceiver();
  receiver = createServer((request, response) => {
    webhookHeaders.push(request.headers);
    request.resume();
    request.on('end', () => response.writeHead(204).end());
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  token = await signToken(JWT_SECRET, { sub: 'writer', name: 'Writer', orgs: [ORG] });
  env = {
    DATABASE_URL: schema.url,
    REDIS_URL: inject('redisUrl'),
    HERALD_REDIS_PREFIX: REDIS_PREFIX,
    JWT_SECRET,
    WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    // Export every 100 ms, not every 5 s: the test waits for the spans.
    OTEL_BSP_SCHEDULE_DELAY: '100',
  };
  [publisher, fanOutPod] = await Promise.all([
    startApiProcess({ ...env, OTEL_RESOURCE_ATTRIBUTES: 'herald.test.pod=publisher' }),
    startApiProcess({ ...env, OTEL_RESOURCE_ATTRIBUTES: 'herald.test.pod=fan-out' }),
  ]);
  dispatcher = await startDispatcherProcess({ ...env, NODE_ENV: 'test', WEBHOOK_POLL_INTERVAL_MS: '100' });
  const { port } = receiver.address() as { port: number };
  await createPostPublishedEndpoint(publisher.baseUrl, token, ORG, `http://127.0.0.1:${port}/hook`);
}, 180_000);

afterAll(async () => {
  await subscriber?.client.dispose();
  await dispatcher?.stop('SIGTERM');
  await Promise.all([publisher?.stop('SIGTERM'), fanOutPod?.stop('SIGTERM')]);
  await new Promise((resolve) => receiver?.close(resolve));
  await collector?.close();
  await schema?.drop();
  const redis = new Redis(inject('redisUrl'));
  const keys = await redis.keys(`${REDIS_PREFIX}*`);
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
});

function inTrace(): ReceivedSpan[] {
  return collector.spans.filter((span) => span.traceId === CALLER_TRACE_ID);
}

describe('one publishPost, traced end to end', () => {
  it('joins the caller trace in the API, on the other pod, in the dispatcher and on the webhook POST', {
    timeout: 90_000,
  }, async () => {
    subscriber = subscribePostPublished(`ws://127.0.0.1:${fanOutPod.port}/graphql`, token, ORG);
    await waitFor('the subscription on the fan-out pod', async () => {
      const text = await (await fetch(`${fanOutPod.baseUrl}/metrics`)).text();
      return /^herald_subscriptions_active 1$/m.test(text);
    });
    const created = await postGraphql(
      publisher.baseUrl,
      token,
      'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
      { input: { orgId: ORG, title: 'traced' } },
    );
    const response = await fetch(`${publisher.baseUrl}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${token}`,
        traceparent: `00-${CALLER_TRACE_ID}-${CALLER_SPAN_ID}-01`,
      },
      body: JSON.stringify({
        query: 'mutation Publish($id: ID!) { publishPost(id: $id) { id status } }',
        variables: { id: created.body.data.createPost.id },
      }),
    });
    expect(((await response.json()) as { data: { publishPost: { status: string } } }).data.publishPost.status).toBe(
      'PUBLISHED',
    );
    await waitFor('the subscriber to receive the post', () => subscriber?.count('traced') === 1);
    await waitFor('the webhook POST', () => webhookHeaders.length > 0);
    // Three processes export them, each on its own schedule: wait for the operation's span as well.
    await waitFor('the operation, fan-out and attempt spans to be exported', () => {
      const names = inTrace().map((span) => span.name);
      return ['mutation Publish', 'subscription fan-out', 'webhook attempt'].every((name) => names.includes(name));
    });

    const spans = inTrace();
    // The GraphQL operation span: the caller's child, named after the operation.
    const operation = spans.find((span) => span.name === 'mutation Publish');
    expect(operation).toMatchObject({
      service: 'herald-api',
      parentSpanId: CALLER_SPAN_ID,
      kind: 2,
      resource: { 'herald.test.pod': 'publisher' },
      attributes: { 'graphql.operation.type': 'mutation', 'graphql.operation.name': 'Publish' },
    });
    // PostgreSQL spans under it (the pg instrumentation), among them the publish statement.
    const queries = spans.filter(
      (span) => span.service === 'herald-api' && span.parentSpanId === operation?.spanId && isPostgres(span),
    );
    expect(
      queries.some((span) => String(span.attributes['db.query.text']).includes('insert into webhook_outbox')),
    ).toBe(true);
    // The batched history mark a publish only schedules serves many publishes: it is in none of their traces.
    await waitFor('the history mark', async () => {
      const { rows } = await schemaQuery(`select historied_at from webhook_outbox where type = 'post.published'`);
      return rows.length > 0 && rows.every((row) => row.historied_at !== null);
    });
    await new Promise((resolve) => setTimeout(resolve, 500)); // one more export round
    expect(inTrace().some((span) => String(span.attributes['db.query.text']).includes('set historied_at'))).toBe(false);
    // And the Redis calls that put the event into the history (the ioredis instrumentation).
    expect(
      spans.some((span) => span.parentSpanId === operation?.spanId && span.attributes['db.system.name'] === 'redis'),
    ).toBe(true);

    // The fan-out on the other pod, one span for its one subscriber group.
    const fanOut = spans.filter((span) => span.name === 'subscription fan-out');
    expect(fanOut).toHaveLength(1);
    expect(fanOut[0]).toMatchObject({
      service: 'herald-api',
      parentSpanId: operation?.spanId,
      resource: { 'herald.test.pod': 'fan-out' },
      attributes: { 'herald.subscription.members': 1, 'herald.subscription.frames_sent': 1 },
    });

    // The dispatcher's attempt, with its receiver's answer, and its traceparent on the POST.
    const attempt = spans.find((span) => span.name === 'webhook attempt');
    expect(attempt).toMatchObject({
      service: 'herald-webhook-dispatcher',
      parentSpanId: operation?.spanId,
      kind: 3,
      attributes: {
        'http.response.status_code': 204,
        'herald.webhook.attempt': 1,
        'herald.webhook.event_type': 'post.published',
      },
    });
    expect(attempt?.attributes['herald.webhook.endpoint_id']).toEqual(expect.any(String));
    expect(attempt?.attributes['herald.webhook.delivery_id']).toEqual(expect.any(String));
    expect(attempt?.attributes['herald.webhook.event_id']).toMatch(/^evt_/);
    expect(attempt?.attributes['herald.webhook.duration_ms']).toEqual(expect.any(Number));
    expect(webhookHeaders[0]?.traceparent).toBe(`00-${CALLER_TRACE_ID}-${attempt?.spanId}-01`);

    // The dispatcher's batch statements serve many events: one span each, linked to the publishing span.
    await waitFor('the fan-out and claim spans', () =>
      ['webhook fan-out', 'webhook claim'].every((name) =>
        collector.spans.some((span) => span.name === name && linksTo(span, operation?.spanId)),
      ),
    );
    const batchSpans = collector.spans.filter((span) => linksTo(span, operation?.spanId));
    expect(batchSpans.every((span) => span.traceId !== CALLER_TRACE_ID && span.parentSpanId === '')).toBe(true);

    // The publisher's access-log line for the request carries the trace's ids.
    const logged = publisher.stdout
      .map((line) => JSON.parse(line) as { msg?: string; trace_id?: string; span_id?: string })
      .find((line) => line.msg === 'request completed' && line.trace_id === CALLER_TRACE_ID);
    expect(logged?.span_id).toBe(operation?.spanId);
  });
});

describe('an operation over graphql-ws', () => {
  it('continues extensions.traceparent, and the publish it runs carries that trace to the webhook', {
    timeout: 60_000,
  }, async () => {
    const traceId = randomBytes(16).toString('hex');
    const callerSpanId = randomBytes(8).toString('hex');
    const created = await postGraphql(
      publisher.baseUrl,
      token,
      'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
      { input: { orgId: ORG, title: 'traced over a socket' } },
    );
    const client = createClient({
      url: `ws://127.0.0.1:${publisher.port}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authToken: token },
      retryAttempts: 0,
    });
    try {
      const result = await new Promise<unknown>((resolve, reject) => {
        let value: unknown;
        client.subscribe(
          {
            query: 'mutation PublishOverSocket($id: ID!) { publishPost(id: $id) { status } }',
            variables: { id: created.body.data.createPost.id },
            extensions: { traceparent: `00-${traceId}-${callerSpanId}-01` },
          },
          { next: (next) => (value = next), error: reject, complete: () => resolve(value) },
        );
      });
      expect(result).toEqual({ data: { publishPost: { status: 'PUBLISHED' } } });
    } finally {
      await client.dispose();
    }
    await waitFor('the operation and attempt spans of the socket publish', () =>
      ['mutation PublishOverSocket', 'webhook attempt'].every((name) =>
        collector.spans.some((span) => span.traceId === traceId && span.name === name),
      ),
    );
    const spans = collector.spans.filter((span) => span.traceId === traceId);
    const operation = spans.find((span) => span.name === 'mutation PublishOverSocket');
    expect(operation).toMatchObject({
      parentSpanId: callerSpanId,
      kind: 2,
      attributes: { 'graphql.operation.type': 'mutation', 'network.protocol.name': 'websocket' },
    });
    expect(spans.some((span) => span.parentSpanId === operation?.spanId && isPostgres(span))).toBe(true);
    expect(spans.find((span) => span.name === 'webhook attempt')?.parentSpanId).toBe(operation?.spanId);
  });
});

describe('a caller that does not sample', () => {
  it('is followed end to end: nothing exported, and the webhook POST says not sampled in the same trace', {
    timeout: 60_000,
  }, async () => {
    const traceId = randomBytes(16).toString('hex');
    const created = await postGraphql(
      publisher.baseUrl,
      token,
      'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
      { input: { orgId: ORG, title: 'not sampled' } },
    );
    const seen = webhookHeaders.length;
    const response = await fetch(`${publisher.baseUrl}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${token}`,
        traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-00`,
      },
      body: JSON.stringify({
        query: 'mutation Publish($id: ID!) { publishPost(id: $id) { id } }',
        variables: { id: created.body.data.createPost.id },
      }),
    });
    expect(response.status).toBe(200);
    await waitFor('the webhook POST', () => webhookHeaders.length > seen);
    const traceparent = String(webhookHeaders.at(-1)?.traceparent);
    expect(traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-00$`));
    // Whatever was exported meanwhile (other tests' spans, batch spans linking elsewhere), none is in it.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(collector.spans.filter((span) => span.traceId === traceId)).toEqual([]);
  });
});

describe('a publish the sampler left out, with no caller trace', () => {
  it('tells its webhook "not sampled": the dispatcher, which samples new traces, records no attempt', {
    timeout: 120_000,
  }, async () => {
    // A pod that never samples a new trace: its requests run in no trace context at all (the cheap path),
    // yet what they publish must carry the decision, or the dispatcher would start a sampled trace.
    const unsampledPod = await startApiProcess({ ...env, OTEL_TRACES_SAMPLER: 'parentbased_always_off' });
    try {
      const created = await postGraphql(
        unsampledPod.baseUrl,
        token,
        'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
        { input: { orgId: ORG, title: 'left out' } },
      );
      const seen = webhookHeaders.length;
      const published = await postGraphql(
        unsampledPod.baseUrl,
        token,
        'mutation Publish($id: ID!) { publishPost(id: $id) { id } }',
        { id: created.body.data.createPost.id },
      );
      expect(published.body.errors).toBeUndefined();
      await waitFor('the webhook POST', () => webhookHeaders.length > seen);
      const traceparent = String(webhookHeaders.at(-1)?.traceparent);
      expect(traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
      const traceId = traceparent.split('-')[1];
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(collector.spans.filter((span) => span.traceId === traceId)).toEqual([]);
    } finally {
      await unsampledPod.stop('SIGTERM');
    }
  });
});

function isPostgres(span: ReceivedSpan): boolean {
  return span.attributes['db.system.name'] === 'postgresql';
}

function linksTo(span: ReceivedSpan, spanId: string | undefined): boolean {
  return span.links.some((link) => link.traceId === CALLER_TRACE_ID && link.spanId === spanId);
}

async function schemaQuery(text: string): Promise<{ rows: Array<Record<string, unknown>> }> {
  const client = new pg.Client({ connectionString: schema.url });
  await client.connect();
  try {
    return await client.query(text);
  } finally {
    await client.end();
  }
}
