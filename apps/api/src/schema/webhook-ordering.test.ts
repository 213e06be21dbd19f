import { startTestReceiver, type TestReceiver } from '@herald/webhook-engine/testing';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';

// The `ordering` setting of webhook endpoints over GraphQL, and the head of a FIFO endpoint's line as
// the console shows it. The engine's side is tested in the webhook engine (fifo-endpoints.test.ts).

const CREATE = /* GraphQL */ `
  mutation Create($input: CreateWebhookEndpointInput!) {
    createWebhookEndpoint(input: $input) { endpoint { id ordering } }
  }
`;
const UPDATE = /* GraphQL */ `
  mutation Update($id: ID!, $input: UpdateWebhookEndpointInput!) {
    updateWebhookEndpoint(id: $id, input: $input) { id ordering }
  }
`;
const HEAD = /* GraphQL */ `
  query Head($id: ID!) {
    webhookEndpoint(id: $id) { ordering fifoHead { heldBack delivery { eventId status } } }
  }
`;
const ENDPOINTS = /* GraphQL */ `
  query Endpoints($orgId: ID!) { webhookEndpoints(orgId: $orgId) { id } }
`;

let api: TestApi;
let receiver: TestReceiver;
let alice: string; // member of org-order
let bob: string; // member of org-other

beforeAll(async () => {
  // Every delivery fails: a FIFO endpoint's head stays stuck and holds the rest back.
  receiver = await startTestReceiver(() => ({ status: 500 }));
  api = await startTestApi({
    databaseUrl: inject('databaseUrl'),
    env: { WEBHOOK_ALLOW_PRIVATE_URLS: 'true', WEBHOOK_TIMEOUT_MS: '500', WEBHOOK_RETRY_BASE_MS: '60000' },
  });
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-order'] });
  bob = await api.token({ sub: 'bob', name: 'Bob', orgs: ['org-other'] });
});

afterAll(async () => {
  await api?.close();
  await receiver?.close();
});

function errorCode(body: { errors?: Array<{ extensions?: Record<string, any> }> }) {
  return body.errors?.[0]?.extensions?.code;
}

async function create(ordering?: string) {
  const input = { orgId: 'org-order', url: receiver.url('/order'), eventTypes: ['post.published'], ordering };
  return api.graphql(CREATE, { input }, alice);
}

describe('webhook endpoint ordering', () => {
  it('is UNORDERED by default, FIFO when asked, and changed by updateWebhookEndpoint for members only', async () => {
    const plain = await create();
    expect(plain.body.errors).toBeUndefined();
    expect(plain.body.data.createWebhookEndpoint.endpoint.ordering).toBe('UNORDERED');
    const fifo = await create('FIFO');
    expect(fifo.body.data.createWebhookEndpoint.endpoint.ordering).toBe('FIFO');

    const id = plain.body.data.createWebhookEndpoint.endpoint.id;
    const updated = await api.graphql(UPDATE, { id, input: { ordering: 'FIFO' } }, alice);
    expect(updated.body.errors).toBeUndefined();
    expect(updated.body.data.updateWebhookEndpoint).toEqual({ id, ordering: 'FIFO' });
    const foreign = await api.graphql(UPDATE, { id, input: { ordering: 'UNORDERED' } }, bob);
    expect(errorCode(foreign.body)).toBe('NOT_FOUND');
    const back = await api.graphql(UPDATE, { id, input: { ordering: 'UNORDERED' } }, alice);
    expect(back.body.data.updateWebhookEndpoint.ordering).toBe('UNORDERED');
  });

  it('rejects an unknown ordering in validation, creating and changing nothing', async () => {
    const before = await api.graphql(ENDPOINTS, { orgId: 'org-order' }, alice);
    const bad = await create('SIDEWAYS');
    expect(errorCode(bad.body)).toBe('BAD_USER_INPUT');
    expect(bad.body.errors?.[0]?.message).toMatch(/SIDEWAYS/);
    const after = await api.graphql(ENDPOINTS, { orgId: 'org-order' }, alice);
    expect(after.body.data.webhookEndpoints).toHaveLength(before.body.data.webhookEndpoints.length);

    const [first] = before.body.data.webhookEndpoints as Array<{ id: string }>;
    const badUpdate = await api.graphql(UPDATE, { id: first!.id, input: { ordering: 'SIDEWAYS' } }, alice);
    expect(errorCode(badUpdate.body)).toBe('BAD_USER_INPUT');
  });

  it("shows a FIFO endpoint's stuck head and how many deliveries it holds back", async () => {
    const { body } = await api.graphql(
      CREATE,
      { input: { orgId: 'org-order', url: receiver.url('/stuck'), eventTypes: ['post.published'], ordering: 'FIFO' } },
      alice,
    );
    const id = body.data.createWebhookEndpoint.endpoint.id as string;
    const empty = await api.graphql(HEAD, { id }, alice);
    expect(empty.body.data.webhookEndpoint.fifoHead).toBeNull();

    const first = await api.createAndPublish(alice, 'org-order', 'first');
    await api.createAndPublish(alice, 'org-order', 'second');
    await api.createAndPublish(alice, 'org-order', 'third');
    await receiver.waitFor(() => receiver.requestsTo('/stuck').length > 0, 20_000);
    const firstEvent = await api.app.database.db
      .selectFrom('webhook_outbox')
      .select('id')
      .where('org_id', '=', 'org-order')
      .where('body', 'like', `%${first}%`)
      .executeTakeFirstOrThrow();
    const deadline = Date.now() + 20_000;
    let head = (await api.graphql(HEAD, { id }, alice)).body.data.webhookEndpoint.fifoHead;
    while (head?.heldBack !== 2 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      head = (await api.graphql(HEAD, { id }, alice)).body.data.webhookEndpoint.fifoHead;
    }
    expect(head).toEqual({ heldBack: 2, delivery: { eventId: firstEvent.id, status: 'PENDING' } });
    // Only the head was attempted.
    expect(new Set(receiver.requestsTo('/stuck').map((request) => request.headers['webhook-id']))).toEqual(
      new Set([firstEvent.id]),
    );

    // Turned unordered, the endpoint lets its line go: the two waiting deliveries are attempted too.
    const unordered = await api.graphql(UPDATE, { id, input: { ordering: 'UNORDERED' } }, alice);
    expect(unordered.body.errors).toBeUndefined();
    expect(unordered.body.data.updateWebhookEndpoint.ordering).toBe('UNORDERED');
    await receiver.waitFor(
      () => new Set(receiver.requestsTo('/stuck').map((request) => request.headers['webhook-id'])).size === 3,
      20_000,
    );
    expect((await api.graphql(HEAD, { id }, alice)).body.data.webhookEndpoint.fifoHead).toBeNull();
  });
});
