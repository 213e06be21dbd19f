import { findWebhookEndpointById } from '@herald/db';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';

const CREATE = /* GraphQL */ `
  mutation Create($input: CreateWebhookEndpointInput!) {
    createWebhookEndpoint(input: $input) { endpoint { id rateLimitPerSecond } }
  }
`;
const SET = /* GraphQL */ `
  mutation Set($id: ID!, $rate: Int) {
    setWebhookEndpointRateLimit(id: $id, rateLimitPerSecond: $rate) { id rateLimitPerSecond }
  }
`;

/** A public address that needs no DNS; nothing here publishes, so nothing is ever sent to it. */
const PUBLIC_URL = 'https://93.184.215.14/hooks/herald';

let api: TestApi;
let alice: string; // member of org-rl-a
let bob: string; // member of org-rl-b

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl') });
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-rl-a'] });
  bob = await api.token({ sub: 'bob', name: 'Bob', orgs: ['org-rl-b'] });
});

afterAll(() => api.close());

function errorCode(body: { errors?: Array<{ extensions?: Record<string, any> }> }) {
  return body.errors?.[0]?.extensions?.code;
}

async function create(rate: unknown) {
  const input = { orgId: 'org-rl-a', url: PUBLIC_URL, eventTypes: ['post.published'], rateLimitPerSecond: rate };
  return (await api.graphql(CREATE, { input }, alice)).body;
}

describe('rateLimitPerSecond', () => {
  it('is stored when an endpoint is created, and set and cleared later', async () => {
    const created = await create(20);
    expect(created.errors).toBeUndefined();
    const { id, rateLimitPerSecond } = created.data.createWebhookEndpoint.endpoint;
    expect(rateLimitPerSecond).toBe(20);
    expect((await findWebhookEndpointById(api.app.database.db, id))?.rate_limit_per_second).toBe(20);

    const set = (await api.graphql(SET, { id, rate: 5 }, alice)).body;
    expect(set.errors).toBeUndefined();
    expect(set.data.setWebhookEndpointRateLimit).toEqual({ id, rateLimitPerSecond: 5 });
    const cleared = (await api.graphql(SET, { id, rate: null }, alice)).body;
    expect(cleared.data.setWebhookEndpointRateLimit.rateLimitPerSecond).toBeNull();
    expect((await findWebhookEndpointById(api.app.database.db, id))?.rate_limit_per_second).toBeNull();
  });

  it('defaults to no limit', async () => {
    const created = await create(undefined);
    expect(created.data.createWebhookEndpoint.endpoint.rateLimitPerSecond).toBeNull();
  });

  it('refuses zero, negative and too large values with BAD_USER_INPUT, creating and changing nothing', async () => {
    const before = (
      await api.app.database.db.selectFrom('webhook_endpoints').select('id').where('org_id', '=', 'org-rl-a').execute()
    ).length;
    for (const rate of [0, -3, 10_001, 2_000_000_000]) {
      const body = await create(rate);
      expect(errorCode(body)).toBe('BAD_USER_INPUT');
      expect(body.errors?.[0]?.message).toContain('rateLimitPerSecond');
    }
    const after = (
      await api.app.database.db.selectFrom('webhook_endpoints').select('id').where('org_id', '=', 'org-rl-a').execute()
    ).length;
    expect(after).toBe(before);

    const { id } = (await create(7)).data.createWebhookEndpoint.endpoint;
    for (const rate of [0, -1, 10_001]) {
      const body = (await api.graphql(SET, { id, rate }, alice)).body;
      expect(errorCode(body)).toBe('BAD_USER_INPUT');
    }
    // Not an integer at all: refused by GraphQL's own Int coercion.
    expect((await api.graphql(SET, { id, rate: 2.5 }, alice)).body.errors).toBeDefined();
    expect((await findWebhookEndpointById(api.app.database.db, id))?.rate_limit_per_second).toBe(7);
  });

  it("is not settable on another organisation's endpoint", async () => {
    const { id } = (await create(3)).data.createWebhookEndpoint.endpoint;
    const body = (await api.graphql(SET, { id, rate: 9 }, bob)).body;
    expect(errorCode(body)).toBe('NOT_FOUND');
    expect((await findWebhookEndpointById(api.app.database.db, id))?.rate_limit_per_second).toBe(3);
  });
});
