import { checkWebhookEventBody, POST_PUBLISHED_EVENT, WEBHOOK_EVENT_TYPES } from '@herald/contracts';
import { startTestReceiver, type TestReceiver } from '@herald/webhook-engine/testing';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';

// The event catalog and endpoint filters over GraphQL, in single mode (PostgreSQL, the dispatcher in
// the API process): what a tenant sets is what the fan-out applies to real publications.

const EVENT_TYPES = /* GraphQL */ `{ webhookEventTypes { name description schema example } }`;
const CREATE = /* GraphQL */ `
  mutation Create($input: CreateWebhookEndpointInput!) {
    createWebhookEndpoint(input: $input) { endpoint { id eventTypes filter } }
  }
`;
const SET_FILTER = /* GraphQL */ `
  mutation SetFilter($id: ID!, $filter: String) { setWebhookEndpointFilter(id: $id, filter: $filter) { id filter } }
`;
const ENDPOINTS = /* GraphQL */ `query Endpoints($orgId: ID!) { webhookEndpoints(orgId: $orgId) { id filter } }`;

let api: TestApi;
let receiver: TestReceiver;
let alice: string; // member of org-cat
let bob: string; // member of org-other

beforeAll(async () => {
  api = await startTestApi({
    databaseUrl: inject('databaseUrl'),
    env: { WEBHOOK_TIMEOUT_MS: '2000', WEBHOOK_ALLOW_PRIVATE_URLS: 'true' },
  });
  receiver = await startTestReceiver();
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-cat'] });
  bob = await api.token({ sub: 'bob', name: 'Bob', orgs: ['org-other'] });
});

afterAll(async () => {
  await receiver?.close();
  await api?.close();
});

async function create(path: string, filter?: string | null, eventTypes = [POST_PUBLISHED_EVENT]) {
  return api.graphql(CREATE, { input: { orgId: 'org-cat', url: receiver.url(path), eventTypes, filter } }, alice);
}

describe('webhookEventTypes', () => {
  it('lists every event type with its description, JSON Schema and an example that passes it', async () => {
    const { body } = await api.graphql(EVENT_TYPES, {}, alice);
    expect(body.errors).toBeUndefined();
    const types = body.data.webhookEventTypes as Array<Record<string, string>>;
    expect(types.map((type) => type.name)).toEqual([...WEBHOOK_EVENT_TYPES]);
    for (const type of types) {
      expect(JSON.parse(type.schema!)).toMatchObject({ type: 'object', properties: { type: { const: type.name } } });
      expect(checkWebhookEventBody(type.name!, type.example)).toBeUndefined();
      expect(type.description!.length).toBeGreaterThan(20);
    }
  });

  it('needs a signed-in caller', async () => {
    const { body } = await api.graphql(EVENT_TYPES);
    expect(body.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED');
  });
});

describe('endpoint filters', () => {
  it('delivers only the publications whose body contains the filter; the body is the catalog’s shape', async () => {
    const filtered = await create('/urgent', '{"data":{"tags":["urgent"]}}');
    expect(filtered.body.errors).toBeUndefined();
    expect(JSON.parse(filtered.body.data.createWebhookEndpoint.endpoint.filter)).toEqual({
      data: { tags: ['urgent'] },
    });
    expect((await create('/all')).body.errors).toBeUndefined();

    const urgent = await api.createAndPublish(alice, 'org-cat', 'Outage', ['ops', 'urgent']);
    const routine = await api.createAndPublish(alice, 'org-cat', 'Newsletter', ['ops']);
    await receiver.waitFor(
      () => receiver.requestsTo('/all').length === 2 && receiver.requestsTo('/urgent').length >= 1,
    );
    const posts = (path: string) => receiver.requestsTo(path).map((request) => JSON.parse(request.body).data.id);
    expect(posts('/urgent')).toEqual([urgent]);
    expect(new Set(posts('/all'))).toEqual(new Set([urgent, routine]));
    // The publish statement builds the body in SQL: it matches the catalog as sent and as stored.
    for (const request of receiver.requestsTo('/all')) {
      expect(checkWebhookEventBody(POST_PUBLISHED_EVENT, request.body)).toBeUndefined();
    }
    const stored = await api.app.database.db
      .selectFrom('webhook_outbox')
      .select('body')
      .where('type', '=', POST_PUBLISHED_EVENT)
      .execute();
    expect(stored).toHaveLength(2);
    for (const row of stored) expect(checkWebhookEventBody(POST_PUBLISHED_EVENT, row.body)).toBeUndefined();
    // Both fan-outs are done (/all has both): the filtered endpoint has one delivery, no SKIPPED row.
    const rows = await api.app.database.db
      .selectFrom('webhook_deliveries')
      .select('status')
      .where('endpoint_id', '=', filtered.body.data.createWebhookEndpoint.endpoint.id)
      .execute();
    // (Its status may still be PENDING for a moment after the receiver got it: not asserted.)
    expect(rows).toHaveLength(1);
    expect(rows[0]!.status).not.toBe('SKIPPED');
  });

  it.each([
    ['not json', /filter must be a JSON object/],
    ['{"data":{"tags":"urgent"}}', /data\.tags is a list: write \["urgent"\]/],
    ['{"data":{"tag":["urgent"]}}', /data\.tag is not a field/],
    ['{"a":{"b":{"c":{"d":{"e":{"f":{"g":1}}}}}}}', /at most 6 levels deep/],
  ])('refuses the filter %s with BAD_USER_INPUT and creates nothing', async (filter, message) => {
    const before = (await api.graphql(ENDPOINTS, { orgId: 'org-cat' }, alice)).body.data.webhookEndpoints.length;
    const { body } = await create('/refused', filter);
    expect(body.errors?.[0]?.extensions).toMatchObject({ code: 'BAD_USER_INPUT', field: 'filter' });
    expect(body.errors?.[0]?.message).toMatch(message);
    expect((await api.graphql(ENDPOINTS, { orgId: 'org-cat' }, alice)).body.data.webhookEndpoints).toHaveLength(before);
  });

  it('refuses a filter that one of the selected event types could never match', async () => {
    const { body } = await create('/mixed', '{"data":{"tags":["urgent"]}}', [
      POST_PUBLISHED_EVENT,
      'webhook.delivery.dead',
    ]);
    expect(body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT');
    expect(body.errors?.[0]?.message).toMatch(/could never match webhook\.delivery\.dead events/);
  });

  it('sets, refuses and clears a filter on an existing endpoint, for members only', async () => {
    const created = await create('/later');
    const id = created.body.data.createWebhookEndpoint.endpoint.id as string;
    const set = await api.graphql(SET_FILTER, { id, filter: '{"data":{"author":{"id":"alice"}}}' }, alice);
    expect(set.body.errors).toBeUndefined();
    expect(JSON.parse(set.body.data.setWebhookEndpointFilter.filter)).toEqual({ data: { author: { id: 'alice' } } });

    const refused = await api.graphql(SET_FILTER, { id, filter: '{"data":{"author":"alice"}}' }, alice);
    expect(refused.body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT');
    const listed = (await api.graphql(ENDPOINTS, { orgId: 'org-cat' }, alice)).body.data.webhookEndpoints;
    expect(listed.find((endpoint: { id: string }) => endpoint.id === id).filter).toBe(
      '{"data":{"author":{"id":"alice"}}}',
    );

    const foreign = await api.graphql(SET_FILTER, { id, filter: null }, bob);
    expect(foreign.body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    const cleared = await api.graphql(SET_FILTER, { id, filter: null }, alice);
    expect(cleared.body.data.setWebhookEndpointFilter.filter).toBeNull();
  });
});
