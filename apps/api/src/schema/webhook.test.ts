import { listActiveWebhookSecrets } from '@herald/db';
import { TEST_KEYRING } from '@herald/testing';
import { waitFor } from '@herald/testing/ports';
import { fanOutOutbox } from '@herald/webhook-engine';
import { startTestReceiver, type TestReceiver } from '@herald/webhook-engine/testing';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';

const CREATE = /* GraphQL */ `
  mutation Create($input: CreateWebhookEndpointInput!) {
    createWebhookEndpoint(input: $input) { secret endpoint { id orgId url eventTypes } }
  }
`;
const ENDPOINTS = /* GraphQL */ `
  query Endpoints($orgId: ID!) { webhookEndpoints(orgId: $orgId) { id url eventTypes } }
`;
const ENDPOINT = /* GraphQL */ `
  query Endpoint($id: ID!, $first: Int, $after: String, $status: WebhookDeliveryStatus) {
    webhookEndpoint(id: $id) {
      id
      deliveries(first: $first, after: $after, status: $status) {
        edges { cursor node { id eventId eventType status nextAttemptAt attempts { at statusCode durationMs error } } }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
`;
const ROTATE = /* GraphQL */ `
  mutation Rotate($id: ID!, $grace: Int) { rotateWebhookSecret(id: $id, gracePeriodSeconds: $grace) { secret endpoint { id } } }
`;
const DELETE = /* GraphQL */ `
  mutation Delete($id: ID!) { deleteWebhookEndpoint(id: $id) }
`;
const REPLAY = /* GraphQL */ `
  mutation Replay($id: ID!) { replayWebhookDelivery(id: $id) { id eventId status nextAttemptAt } }
`;
const CREATE_POST = /* GraphQL */ `
  mutation CreatePost($input: CreatePostInput!) { createPost(input: $input) { id } }
`;
const PUBLISH = /* GraphQL */ `
  mutation Publish($id: ID!) { publishPost(id: $id) { id publishedAt } }
`;

/** A public address that needs no DNS; nothing here ever publishes to its organisation. */
const PUBLIC_URL = 'https://93.184.215.14/hooks/herald';

let api: TestApi;
let alice: string; // member of org-a
let bob: string; // member of org-b

beforeAll(async () => {
  // No Redis: the in-process dispatcher runs; nothing listens at PUBLIC_URL, so attempts fail fast.
  api = await startTestApi({ databaseUrl: inject('databaseUrl'), env: { WEBHOOK_TIMEOUT_MS: '500' } });
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-a'] });
  bob = await api.token({ sub: 'bob', name: 'Bob', orgs: ['org-b'] });
});

afterAll(() => api.close());

async function createEndpoint(token: string, orgId: string, url = PUBLIC_URL) {
  const { body } = await api.graphql(CREATE, { input: { orgId, url, eventTypes: ['post.published'] } }, token);
  expect(body.errors).toBeUndefined();
  return body.data.createWebhookEndpoint as { secret: string; endpoint: { id: string; url: string } };
}

function errorCode(body: { errors?: Array<{ extensions?: Record<string, any> }> }) {
  return body.errors?.[0]?.extensions?.code;
}

describe('createWebhookEndpoint', () => {
  it('registers an endpoint and returns its whsec_ secret once', async () => {
    const { body } = await api.graphql(
      CREATE,
      { input: { orgId: 'org-a', url: PUBLIC_URL, eventTypes: ['post.published', 'post.published'] } },
      alice,
    );
    expect(body.errors).toBeUndefined();
    const { secret, endpoint } = body.data.createWebhookEndpoint;
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(endpoint).toMatchObject({ orgId: 'org-a', url: PUBLIC_URL, eventTypes: ['post.published'] });
    expect(endpoint.id).toMatch(/^we_/);
    expect(await listActiveWebhookSecrets(api.app.database.db, endpoint.id, TEST_KEYRING)).toEqual([secret]);

    const listed = await api.graphql(ENDPOINTS, { orgId: 'org-a' }, alice);
    expect(listed.body.data.webhookEndpoints).toContainEqual({
      id: endpoint.id,
      url: PUBLIC_URL,
      eventTypes: ['post.published'],
    });
    expect(JSON.stringify(listed.body)).not.toContain(secret);
  });

  it('refuses unknown event types', async () => {
    const { body } = await api.graphql(
      CREATE,
      { input: { orgId: 'org-a', url: PUBLIC_URL, eventTypes: ['post.deleted'] } },
      alice,
    );
    expect(errorCode(body)).toBe('BAD_USER_INPUT');
    expect(body.errors?.[0]?.message).toContain('post.deleted');
  });

  it.each([
    ['http://169.254.169.254/latest/meta-data/', /link-local/],
    ['http://[fe80::1]/hook', /link-local/],
    ['http://[::ffff:169.254.169.254]/hook', /link-local/],
    ['http://127.0.0.1:8080/hook', /loopback.*WEBHOOK_ALLOW_PRIVATE_URLS/],
    ['http://localhost:8080/hook', /resolves to 127\.0\.0\.1 is a loopback/],
    ['http://10.1.2.3/hook', /private/],
    ['http://192.168.0.10/hook', /private/],
    ['http://100.64.0.1/hook', /carrierGradeNat/],
    ['http://[fd00::1]/hook', /uniqueLocal/],
    ['http://0.0.0.0/hook', /special-purpose/],
    ['ftp://93.184.215.14/hook', /only http and https/],
    ['https://user:pw@93.184.215.14/hook', /credentials/],
    ['not a url', /absolute URL/],
    ['https://no-such-host.invalid/hook', /does not resolve/],
  ])('refuses %s with BAD_USER_INPUT naming the reason', async (url, reason) => {
    const { body } = await api.graphql(
      CREATE,
      { input: { orgId: 'org-a', url, eventTypes: ['post.published'] } },
      alice,
    );
    expect(errorCode(body)).toBe('BAD_USER_INPUT');
    expect(body.errors?.[0]?.message).toMatch(/^url refused: /);
    expect(body.errors?.[0]?.message).toMatch(reason);
    expect(body.errors?.[0]?.extensions?.field).toBe('url');
  });
});

describe('tenancy', () => {
  let bobsEndpoint: string;
  let bobsDelivery: string;

  beforeAll(async () => {
    bobsEndpoint = (await createEndpoint(bob, 'org-b')).endpoint.id;
    const { body } = await api.graphql(CREATE_POST, { input: { orgId: 'org-b', title: 'B news' } }, bob);
    // No receiver exists at PUBLIC_URL; the delivery is only read, never awaited.
    await api.graphql(PUBLISH, { id: body.data.createPost.id }, bob);
    const event = await api.app.database.db
      .selectFrom('webhook_outbox')
      .select('id')
      .where('org_id', '=', 'org-b')
      .executeTakeFirstOrThrow();
    void event;
    // Fanned out here or by the API's own dispatcher, woken by the publish: whichever commits first
    // (this pass finds nothing while that one holds the outbox row, so wait for the row to appear).
    await fanOutOutbox(api.app.database.db, { limit: 100, queueLeaseMs: 60_000 });
    const delivery = () =>
      api.app.database.db
        .selectFrom('webhook_deliveries')
        .select('id')
        .where('endpoint_id', '=', bobsEndpoint)
        .executeTakeFirst();
    await waitFor("bob's delivery", async () => (await delivery()) !== undefined);
    bobsDelivery = (await delivery())!.id;
  });

  it('refuses another organisation with FORBIDDEN', async () => {
    const created = await api.graphql(
      CREATE,
      { input: { orgId: 'org-b', url: PUBLIC_URL, eventTypes: ['post.published'] } },
      alice,
    );
    expect(errorCode(created.body)).toBe('FORBIDDEN');
    const listed = await api.graphql(ENDPOINTS, { orgId: 'org-b' }, alice);
    expect(errorCode(listed.body)).toBe('FORBIDDEN');
    expect(listed.body.data).toBeNull();
  });

  it("answers another organisation's ids exactly like unknown ids", async () => {
    const foreign = await api.graphql(ENDPOINT, { id: bobsEndpoint }, alice);
    const unknown = await api.graphql(ENDPOINT, { id: 'we_unknown' }, alice);
    expect(foreign.body).toEqual({ data: { webhookEndpoint: null } });
    expect(unknown.body).toEqual(foreign.body);

    for (const [document, variables] of [
      [ROTATE, { id: bobsEndpoint }],
      [DELETE, { id: bobsEndpoint }],
      [REPLAY, { id: bobsDelivery }],
    ] as const) {
      const answer = await api.graphql(document, variables, alice);
      const unknownAnswer = await api.graphql(document, { id: 'unknown' }, alice);
      expect(errorCode(answer.body)).toBe('NOT_FOUND');
      expect(answer.body.errors?.[0]?.message).toBe(unknownAnswer.body.errors?.[0]?.message);
    }
    // Nothing changed for bob.
    const own = await api.graphql(ENDPOINT, { id: bobsEndpoint }, bob);
    expect(own.body.data.webhookEndpoint.deliveries.edges).toHaveLength(1);
    expect(await listActiveWebhookSecrets(api.app.database.db, bobsEndpoint, TEST_KEYRING)).toHaveLength(1);
  });

  it('answers UNAUTHENTICATED without a token', async () => {
    for (const [document, variables] of [
      [ENDPOINTS, { orgId: 'org-b' }],
      [ENDPOINT, { id: bobsEndpoint }],
      [CREATE, { input: { orgId: 'org-b', url: PUBLIC_URL, eventTypes: ['post.published'] } }],
      [ROTATE, { id: bobsEndpoint }],
      [DELETE, { id: bobsEndpoint }],
      [REPLAY, { id: bobsDelivery }],
    ] as const) {
      const { body } = await api.graphql(document, variables);
      expect(errorCode(body)).toBe('UNAUTHENTICATED');
    }
  });
});

describe('rotateWebhookSecret', () => {
  it('keeps the old secret signing beside the new one for the grace period', async () => {
    const { endpoint, secret: first } = await createEndpoint(alice, 'org-a');
    const { body } = await api.graphql(ROTATE, { id: endpoint.id }, alice);
    expect(body.errors).toBeUndefined();
    const second = body.data.rotateWebhookSecret.secret as string;
    expect(second).toMatch(/^whsec_/);
    expect(second).not.toBe(first);
    expect(await listActiveWebhookSecrets(api.app.database.db, endpoint.id, TEST_KEYRING)).toEqual([second, first]);

    // A rotation with no grace retires every secret in use at once.
    const third = (await api.graphql(ROTATE, { id: endpoint.id, grace: 0 }, alice)).body.data.rotateWebhookSecret;
    expect(await listActiveWebhookSecrets(api.app.database.db, endpoint.id, TEST_KEYRING)).toEqual([third.secret]);
  });

  it('refuses a grace period out of bounds', async () => {
    const { endpoint } = await createEndpoint(alice, 'org-a');
    const { body } = await api.graphql(ROTATE, { id: endpoint.id, grace: -1 }, alice);
    expect(errorCode(body)).toBe('BAD_USER_INPUT');
  });
});

describe('deleteWebhookEndpoint', () => {
  it('deletes the endpoint; a second delete is NOT_FOUND', async () => {
    const { endpoint } = await createEndpoint(alice, 'org-a');
    expect((await api.graphql(DELETE, { id: endpoint.id }, alice)).body).toEqual({
      data: { deleteWebhookEndpoint: true },
    });
    expect((await api.graphql(ENDPOINT, { id: endpoint.id }, alice)).body.data.webhookEndpoint).toBeNull();
    expect(errorCode((await api.graphql(DELETE, { id: endpoint.id }, alice)).body)).toBe('NOT_FOUND');
  });
});

describe('publishPost and the outbox', () => {
  it('records one post.published event per publication, in the documented webhook body', async () => {
    const { body } = await api.graphql(
      CREATE_POST,
      { input: { orgId: 'org-outbox', title: 'Hi', tags: ['x'] } },
      await api.token({ sub: 'olga', name: 'Olga', orgs: ['org-outbox'] }),
    );
    const token = await api.token({ sub: 'olga', name: 'Olga', orgs: ['org-outbox'] });
    const published = await api.graphql(PUBLISH, { id: body.data.createPost.id }, token);
    await api.graphql(PUBLISH, { id: body.data.createPost.id }, token);

    const rows = await api.app.database.db
      .selectFrom('webhook_outbox')
      .selectAll()
      .where('org_id', '=', 'org-outbox')
      .execute();
    expect(rows).toHaveLength(1);
    const event = JSON.parse(rows[0]!.body);
    expect(event).toEqual({
      id: rows[0]!.id,
      type: 'post.published',
      created: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      data: {
        id: body.data.createPost.id,
        orgId: 'org-outbox',
        title: 'Hi',
        tags: ['x'],
        status: 'PUBLISHED',
        publishedAt: published.body.data.publishPost.publishedAt,
        author: { id: 'olga', name: 'Olga' },
      },
    });
    expect(event.id).toMatch(/^evt_[0-9a-f]{32}$/);
  });
});

describe('deliveries', () => {
  it('refuses a page size out of bounds and a garbled cursor', async () => {
    const { endpoint } = await createEndpoint(alice, 'org-a');
    expect(errorCode((await api.graphql(ENDPOINT, { id: endpoint.id, first: 1000 }, alice)).body)).toBe(
      'BAD_USER_INPUT',
    );
    expect(errorCode((await api.graphql(ENDPOINT, { id: endpoint.id, after: 'garbage' }, alice)).body)).toBe(
      'BAD_USER_INPUT',
    );
  });
});

describe('with WEBHOOK_ALLOW_PRIVATE_URLS and a local receiver', () => {
  let local: TestApi;
  let receiver: TestReceiver;
  beforeAll(async () => {
    // The in-process dispatcher delivers for real; millisecond retries and a 1 s horizon.
    local = await startTestApi({
      databaseUrl: inject('databaseUrl'),
      env: {
        WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
        WEBHOOK_TIMEOUT_MS: '500',
        WEBHOOK_RETRY_BASE_MS: '20',
        WEBHOOK_RETRY_HORIZON: '1s',
      },
    });
    receiver = await startTestReceiver();
  });
  afterAll(async () => {
    await receiver.close();
    await local.close();
  });

  async function publishIn(token: string, orgId: string, title: string) {
    const { body } = await local.graphql(CREATE_POST, { input: { orgId, title } }, token);
    await local.graphql(PUBLISH, { id: body.data.createPost.id }, token);
  }

  async function deliveries(token: string, variables: Record<string, unknown>) {
    const { body } = await local.graphql(ENDPOINT, variables, token);
    expect(body.errors).toBeUndefined();
    return body.data.webhookEndpoint.deliveries;
  }

  async function waitForDeliveries(token: string, id: string, status: string, count: number) {
    for (let i = 0; i < 500; i++) {
      const page = await deliveries(token, { id, status });
      if (page.edges.length >= count) return page;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    throw new Error(`no ${count} ${status} deliveries`);
  }

  it('pages the delivery history newest first and filters it by status', async () => {
    const token = await local.token({ sub: 'pia', name: 'Pia', orgs: ['org-pages'] });
    const created = await local.graphql(
      CREATE,
      { input: { orgId: 'org-pages', url: receiver.url('/pages'), eventTypes: ['post.published'] } },
      token,
    );
    const endpointId = created.body.data.createWebhookEndpoint.endpoint.id;
    for (let i = 0; i < 3; i++) await publishIn(token, 'org-pages', `p${i}`);
    const all = await waitForDeliveries(token, endpointId, 'SUCCEEDED', 3);
    expect(all.edges).toHaveLength(3);
    for (const { node } of all.edges) {
      expect(node).toMatchObject({ eventType: 'post.published', status: 'SUCCEEDED', nextAttemptAt: null });
      expect(node.id).toMatch(/^del_/);
      expect(node.attempts).toEqual([
        { at: expect.any(String), statusCode: 200, durationMs: expect.any(Number), error: null },
      ]);
    }

    const first = await deliveries(token, { id: endpointId, first: 2 });
    expect(first.pageInfo.hasNextPage).toBe(true);
    const rest = await deliveries(token, { id: endpointId, first: 2, after: first.pageInfo.endCursor });
    expect(rest.pageInfo.hasNextPage).toBe(false);
    expect([...first.edges, ...rest.edges].map((edge: any) => edge.node.id)).toEqual(
      all.edges.map((edge: any) => edge.node.id),
    );
    expect((await deliveries(token, { id: endpointId, status: 'DEAD' })).edges).toEqual([]);
    expect(new Set(receiver.requestsTo('/pages').map((request) => request.headers['x-webhook-id']))).toEqual(
      new Set(all.edges.map((edge: any) => edge.node.eventId)),
    );
  });

  it('shows a dead delivery with every attempt, and replays it with the same event id', async () => {
    const token = await local.token({ sub: 'dora', name: 'Dora', orgs: ['org-dead'] });
    receiver.behave(() => ({ status: 500 }), '/dead');
    const created = await local.graphql(
      CREATE,
      { input: { orgId: 'org-dead', url: receiver.url('/dead'), eventTypes: ['post.published'] } },
      token,
    );
    const endpointId = created.body.data.createWebhookEndpoint.endpoint.id;
    await publishIn(token, 'org-dead', 'doomed');
    const dead = (await waitForDeliveries(token, endpointId, 'DEAD', 1)).edges[0].node;
    expect(dead.nextAttemptAt).toBeNull();
    expect(dead.attempts.length).toBeGreaterThanOrEqual(2);
    expect(dead.attempts.every((attempt: any) => attempt.statusCode === 500 && attempt.error === 'HTTP 500')).toBe(
      true,
    );
    const sent = receiver.requestsTo('/dead').length;
    expect(sent).toBe(dead.attempts.length);

    receiver.behave(() => ({ status: 200 }), '/dead');
    const replayed = await local.graphql(REPLAY, { id: dead.id }, token);
    expect(replayed.body.data.replayWebhookDelivery).toMatchObject({
      id: dead.id,
      eventId: dead.eventId,
      status: 'PENDING',
    });
    const succeeded = (await waitForDeliveries(token, endpointId, 'SUCCEEDED', 1)).edges[0].node;
    expect(succeeded.attempts).toHaveLength(dead.attempts.length + 1);
    expect(succeeded.attempts.at(-1)).toMatchObject({ statusCode: 200, error: null });
    const ids = receiver.requestsTo('/dead').map((request) => request.headers['x-webhook-id']);
    expect(new Set(ids)).toEqual(new Set([dead.eventId]));
  });

  it('accepts loopback and private receivers but still refuses link-local ones', async () => {
    const token = await local.token({ sub: 'lu', name: 'Lu', orgs: ['org-l'] });
    for (const url of [
      'http://127.0.0.1:9/hook',
      'http://localhost:9/hook',
      'http://10.0.0.5/hook',
      'http://[::1]:9/hook',
    ]) {
      const { body } = await local.graphql(
        CREATE,
        { input: { orgId: 'org-l', url, eventTypes: ['post.published'] } },
        token,
      );
      expect(body.errors).toBeUndefined();
    }
    for (const url of ['http://169.254.169.254/latest/meta-data/', 'http://[fe80::1%25eth0]/x', 'http://[fe80::1]/x']) {
      const { body } = await local.graphql(
        CREATE,
        { input: { orgId: 'org-l', url, eventTypes: ['post.published'] } },
        token,
      );
      expect(errorCode(body)).toBe('BAD_USER_INPUT');
    }
  });
});

describe('schema', () => {
  it('keeps the public webhook names', async () => {
    const { printHeraldSchema } = await import('./print.js');
    const sdl = printHeraldSchema();
    for (const fragment of [
      'createWebhookEndpoint(input: CreateWebhookEndpointInput!): CreateWebhookEndpointPayload!',
      'deleteWebhookEndpoint(id: ID!): Boolean!',
      'replayWebhookDelivery(id: ID!): WebhookDelivery!',
      'webhookEndpoints(orgId: ID!): [WebhookEndpoint!]!',
      'webhookEndpoint(id: ID!): WebhookEndpoint',
      'eventTypes: [String!]!',
      'status: WebhookDeliveryStatus!',
      'attempts: [WebhookAttempt!]!',
      'nextAttemptAt: DateTime',
      'statusCode: Int',
      'durationMs: Int!',
      'error: String',
    ]) {
      expect(sdl).toContain(fragment);
    }
    expect(sdl).toMatch(/rotateWebhookSecret\(\s*id: ID!/s);
    expect(sdl).toMatch(/\): RotateWebhookSecretPayload!/);
    expect(sdl).toMatch(/enum WebhookDeliveryStatus \{[^}]*PENDING[^}]*SUCCEEDED[^}]*DEAD/s);
    expect(sdl).toMatch(
      /deliveries\(\s*(""".*?"""\s*)?first: Int\s*after: String\s*(""".*?"""\s*)?status: WebhookDeliveryStatus\s.*?\): WebhookDeliveryConnection!/s,
    );
  });
});
