import { WEBHOOK_ENDPOINT_DISABLED_EVENT, WEBHOOK_TEST_EVENT } from '@herald/contracts';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';

// An event whose body does not match the catalog is a bug in Herald: it is not recorded, it is logged
// at error and counted (herald_webhook_events_invalid_total{type}), and an operation that stands on its
// own (disabling an endpoint) still succeeds. Herald's real builders produce valid bodies
// (webhook-event-check.test.ts in @herald/db), so here the catalog's check is made to refuse them.

const REFUSED_TYPES = new Set<string>([WEBHOOK_ENDPOINT_DISABLED_EVENT, WEBHOOK_TEST_EVENT]);

vi.mock('@herald/contracts', async (importOriginal) => {
  const original = await importOriginal<typeof import('@herald/contracts')>();
  return {
    ...original,
    checkWebhookEventBody: (type: string, body: unknown) =>
      REFUSED_TYPES.has(type) ? ['/data: refused by this test'] : original.checkWebhookEventBody(type, body),
  };
});

const CREATE = /* GraphQL */ `
  mutation Create($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }
`;
const DISABLE = /* GraphQL */ `mutation Disable($id: ID!) { disableWebhookEndpoint(id: $id) { id status } }`;
const SEND_TEST = /* GraphQL */ `mutation Test($id: ID!) { sendTestWebhook(endpointId: $id) { id } }`;

let api: TestApi;
let token: string;

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl') });
  token = await api.token({ sub: 'ivy', name: 'Ivy', orgs: ['org-inv'] });
});

afterAll(() => api?.close());

async function invalidCount(type: string): Promise<number> {
  const text = await api.app.metrics.registry.metrics();
  const line = text
    .split('\n')
    .find((entry) => entry.startsWith(`herald_webhook_events_invalid_total{type="${type}"}`));
  return Number(line?.split(' ').at(-1));
}

async function outboxCount(type: string): Promise<number> {
  const rows = await api.app.database.db.selectFrom('webhook_outbox').select('id').where('type', '=', type).execute();
  return rows.length;
}

describe('an event body the catalog refuses', () => {
  it('is not recorded and is counted; the disable it announces still happens', async () => {
    const created = await api.graphql(
      CREATE,
      { input: { orgId: 'org-inv', url: 'https://93.184.215.14/hook', eventTypes: ['post.published'] } },
      token,
    );
    const id = created.body.data.createWebhookEndpoint.endpoint.id as string;
    expect(await invalidCount(WEBHOOK_ENDPOINT_DISABLED_EVENT)).toBe(0);

    const disabled = await api.graphql(DISABLE, { id }, token);
    expect(disabled.body.errors).toBeUndefined();
    expect(disabled.body.data.disableWebhookEndpoint).toEqual({ id, status: 'DISABLED' });
    expect(await outboxCount(WEBHOOK_ENDPOINT_DISABLED_EVENT)).toBe(0);
    expect(await invalidCount(WEBHOOK_ENDPOINT_DISABLED_EVENT)).toBe(1);

    // A test send is nothing but its event: the mutation fails (masked), and nothing is recorded.
    const test = await api.graphql(SEND_TEST, { id }, token);
    expect(test.body.errors?.[0]?.extensions?.code).toBe('INTERNAL_SERVER_ERROR');
    expect(await outboxCount(WEBHOOK_TEST_EVENT)).toBe(0);
    const deliveries = await api.app.database.db.selectFrom('webhook_deliveries').select('id').execute();
    expect(deliveries).toEqual([]);
    expect(await invalidCount(WEBHOOK_TEST_EVENT)).toBe(1);
  });
});
