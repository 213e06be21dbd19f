import { waitFor } from '@herald/testing/ports';
import { startTestReceiver, type TestReceiver } from '@herald/webhook-engine/testing';
import { verifyWebhook } from '@herald/webhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from './testing/test-api.js';

// Embedded mode (no DATABASE_URL, no REDIS_URL): the API delivers webhooks itself, with the same
// dispatcher running in-process on the embedded database. Nothing else is started.

const CREATE_ENDPOINT = /* GraphQL */ `
  mutation Create($input: CreateWebhookEndpointInput!) {
    createWebhookEndpoint(input: $input) { secret endpoint { id } }
  }
`;
const CREATE_POST = /* GraphQL */ `
  mutation CreatePost($input: CreatePostInput!) { createPost(input: $input) { id } }
`;
const PUBLISH = /* GraphQL */ `
  mutation Publish($id: ID!) { publishPost(id: $id) { id publishedAt } }
`;
const DELIVERIES = /* GraphQL */ `
  query Deliveries($id: ID!) {
    webhookEndpoint(id: $id) {
      deliveries(first: 10) { edges { node { eventId status attempts { statusCode error durationMs } } } }
    }
  }
`;

let api: TestApi;
let receiver: TestReceiver;
let token: string;

beforeAll(async () => {
  api = await startTestApi({ env: { WEBHOOK_RETRY_BASE_MS: '20', WEBHOOK_TIMEOUT_MS: '2000' } });
  receiver = await startTestReceiver();
  token = await api.token({ sub: 'emma', name: 'Emma', orgs: ['demo'] });
});

afterAll(async () => {
  await receiver?.close();
  await api?.close();
});

async function publishPost(title: string) {
  const created = await api.graphql(CREATE_POST, { input: { orgId: 'demo', title, tags: ['news'] } }, token);
  const published = await api.graphql(PUBLISH, { id: created.body.data.createPost.id }, token);
  expect(published.body.errors).toBeUndefined();
  return published.body.data.publishPost as { id: string; publishedAt: string };
}

async function deliveriesOf(endpointId: string) {
  const { body } = await api.graphql(DELIVERIES, { id: endpointId }, token);
  return body.data.webhookEndpoint.deliveries.edges.map((edge: any) => edge.node);
}

describe('embedded mode', () => {
  it('runs no Redis and delivers a signed post.published to a local receiver', async () => {
    expect(api.config.mode).toBe('embedded');
    expect(api.config.redisUrl).toBeUndefined();
    // Loopback receivers are allowed by default in embedded mode (WEBHOOK_ALLOW_PRIVATE_URLS).
    const { body } = await api.graphql(
      CREATE_ENDPOINT,
      { input: { orgId: 'demo', url: receiver.url('/embedded'), eventTypes: ['post.published'] } },
      token,
    );
    expect(body.errors).toBeUndefined();
    const { secret, endpoint } = body.data.createWebhookEndpoint;

    const post = await publishPost('Hello webhooks');
    await receiver.waitFor(() => receiver.requestsTo('/embedded').length === 1);
    const [request] = receiver.requestsTo('/embedded');
    const event = verifyWebhook({ rawBody: request!.body, headers: request!.headers, secrets: [secret] });
    expect(event).toMatchObject({
      type: 'post.published',
      data: {
        id: post.id,
        orgId: 'demo',
        title: 'Hello webhooks',
        tags: ['news'],
        status: 'PUBLISHED',
        publishedAt: post.publishedAt,
        author: { id: 'emma', name: 'Emma' },
      },
    });

    let deliveries = await deliveriesOf(endpoint.id);
    // The receiver has answered; the outcome is recorded a moment later (later still on a busy host).
    await waitFor(
      'the delivery recorded SUCCEEDED',
      async () => {
        deliveries = await deliveriesOf(endpoint.id);
        return deliveries[0]?.status === 'SUCCEEDED';
      },
      { timeoutMs: 30_000, intervalMs: 20 },
    ).catch(() => undefined); // past the wait, the assertion below shows the deliveries as they are
    expect(deliveries).toEqual([
      {
        eventId: event.id,
        status: 'SUCCEEDED',
        attempts: [{ statusCode: 200, error: null, durationMs: expect.any(Number) }],
      },
    ]);
  });

  it('retries a failed delivery with the same event id and shows every attempt', async () => {
    receiver.behave((_request, nth) => ({ status: nth === 1 ? 503 : 200 }), '/flaky');
    const { body } = await api.graphql(
      CREATE_ENDPOINT,
      { input: { orgId: 'demo', url: receiver.url('/flaky'), eventTypes: ['post.published'] } },
      token,
    );
    const endpointId = body.data.createWebhookEndpoint.endpoint.id;
    await publishPost('Flaky receiver');
    await receiver.waitFor(() => receiver.requestsTo('/flaky').length === 2);
    const ids = receiver.requestsTo('/flaky').map((request) => request.headers['x-webhook-id']);
    expect(ids[0]).toMatch(/^evt_/);
    expect(ids[1]).toBe(ids[0]);

    let deliveries = await deliveriesOf(endpointId);
    await waitFor(
      'the retried delivery recorded SUCCEEDED',
      async () => {
        deliveries = await deliveriesOf(endpointId);
        return deliveries[0]?.status === 'SUCCEEDED';
      },
      { timeoutMs: 30_000, intervalMs: 20 },
    ).catch(() => undefined); // past the wait, the assertion below shows the deliveries as they are
    expect(deliveries[0].attempts.map((attempt: any) => [attempt.statusCode, attempt.error])).toEqual([
      [503, 'HTTP 503'],
      [200, null],
    ]);
  });

  it('exposes the webhook metrics on the API /metrics', async () => {
    const text = await (await api.fetch('/metrics')).text();
    expect(text).toMatch(/^herald_webhook_attempts_total\{outcome="success"\} [1-9]/m);
    expect(text).toContain('herald_webhook_retry_backlog');
    expect(text).toContain('herald_webhook_stream_lag');
  });
});
