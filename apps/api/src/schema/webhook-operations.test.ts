import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { listActiveWebhookSecrets, sealSecret } from '@herald/db';
import { TEST_KEYRING } from '@herald/testing';
import { verifyWebhook } from '@herald/webhooks';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';

// The tenant's webhook tools over GraphQL (disable and enable, test events, dead-letter replay, the
// delivery log), against real PostgreSQL with the in-process dispatcher delivering to a receiver on
// 127.0.0.1.

const CREATE = /* GraphQL */ `
  mutation Create($input: CreateWebhookEndpointInput!) {
    createWebhookEndpoint(input: $input) { secret endpoint { id status disabledAt disabledReason } }
  }
`;
const ENDPOINT_FIELDS = 'id orgId status disabledAt disabledReason failingSince pausedUntil';
const DISABLE = `mutation($id: ID!, $reason: String) { disableWebhookEndpoint(id: $id, reason: $reason) { ${ENDPOINT_FIELDS} } }`;
const ENABLE = `mutation($id: ID!) { enableWebhookEndpoint(id: $id) { ${ENDPOINT_FIELDS} } }`;
const SEND_TEST = /* GraphQL */ `
  mutation($id: ID!) { sendTestWebhook(endpointId: $id) { id eventId eventType endpointId status attempts { statusCode } } }
`;
const REPLAY_DEAD = 'mutation($id: ID!) { replayDeadWebhookDeliveries(endpointId: $id) }';
const ENDPOINTS = `query($orgId: ID!) { webhookEndpoints(orgId: $orgId) { ${ENDPOINT_FIELDS} } }`;
const LOG = /* GraphQL */ `
  query Log(
    $id: ID!
    $first: Int
    $after: String
    $status: WebhookDeliveryStatus
    $eventType: String
    $eventId: ID
    $createdAfter: DateTime
    $createdBefore: DateTime
    $lastAttempts: Int
  ) {
    webhookEndpoint(id: $id) {
      id
      status
      successRate(lastAttempts: $lastAttempts)
      deliveries(
        first: $first
        after: $after
        status: $status
        eventType: $eventType
        eventId: $eventId
        createdAfter: $createdAfter
        createdBefore: $createdBefore
      ) {
        edges { cursor node { id eventId eventType endpointId status attempts { statusCode error responseBody } } }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
`;

interface Received {
  path: string;
  body: string;
  headers: IncomingHttpHeaders;
}

/** A receiver on 127.0.0.1 that records every request and answers with the status set for its path. */
async function startReceiver() {
  const received: Received[] = [];
  const statusByPath = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const path = req.url ?? '/';
      received.push({ path, body: Buffer.concat(chunks).toString('utf8'), headers: req.headers });
      res.writeHead(statusByPath.get(path) ?? 200, { 'content-type': 'text/plain' }).end('ok from receiver');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: (path: string) => `http://127.0.0.1:${port}${path}`,
    answer: (path: string, status: number) => statusByPath.set(path, status),
    requestsTo: (path: string) => received.filter((request) => request.path === path),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

let api: TestApi;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
let alice: string; // admin of org-ops-a
let mallory: string; // admin of org-ops-m only

beforeAll(async () => {
  api = await startTestApi({
    databaseUrl: inject('databaseUrl'),
    env: {
      WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
      WEBHOOK_TIMEOUT_MS: '500',
      WEBHOOK_RETRY_BASE_MS: '20',
      WEBHOOK_RETRY_HORIZON: '1s',
    },
  });
  receiver = await startReceiver();
  alice = await api.token({ sub: 'alice-ops', name: 'Alice', orgs: ['org-ops-a'] });
  mallory = await api.token({ sub: 'mallory', name: 'Mallory', orgs: ['org-ops-m'] });
});

afterAll(async () => {
  await api.close();
  await receiver.close();
});

async function createEndpoint(path: string, eventTypes = ['post.published']) {
  const { body } = await api.graphql(
    CREATE,
    { input: { orgId: 'org-ops-a', url: receiver.url(path), eventTypes } },
    alice,
  );
  expect(body.errors).toBeUndefined();
  return body.data.createWebhookEndpoint as { secret: string; endpoint: { id: string } };
}

async function log(variables: Record<string, unknown>, token = alice) {
  const { body } = await api.graphql(LOG, variables, token);
  expect(body.errors).toBeUndefined();
  return body.data.webhookEndpoint;
}

/** Polls the delivery log until `done` holds (bounded: 10 s). */
async function waitForLog(variables: Record<string, unknown>, done: (endpoint: any) => boolean) {
  for (let i = 0; i < 500; i++) {
    const endpoint = await log(variables);
    if (done(endpoint)) return endpoint;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`the delivery log never reached the expected state: ${JSON.stringify(variables)}`);
}

function errorCode(body: { errors?: Array<{ extensions?: { code?: string } }> }): string | undefined {
  return body.errors?.[0]?.extensions?.code;
}

describe('disableWebhookEndpoint / enableWebhookEndpoint', () => {
  it('disables with a reason, records one webhook.endpoint.disabled event for the other endpoints, enables and resets the streak', async () => {
    const { endpoint } = await createEndpoint('/health');
    expect(endpoint).toMatchObject({ status: 'ENABLED', disabledAt: null, disabledReason: null });

    const disabled = await api.graphql(DISABLE, { id: endpoint.id, reason: 'maintenance until Monday' }, alice);
    expect(disabled.body.errors).toBeUndefined();
    expect(disabled.body.data.disableWebhookEndpoint).toMatchObject({
      status: 'DISABLED',
      disabledReason: 'maintenance until Monday',
      disabledAt: expect.any(String),
    });
    // A second disable changes nothing and records no second event.
    const again = await api.graphql(DISABLE, { id: endpoint.id }, alice);
    expect(again.body.data.disableWebhookEndpoint).toEqual(disabled.body.data.disableWebhookEndpoint);
    const events = await api.app.database.db
      .selectFrom('webhook_outbox')
      .selectAll()
      .where('type', '=', 'webhook.endpoint.disabled')
      .where('exclude_endpoint_id', '=', endpoint.id)
      .execute();
    expect(events).toHaveLength(1);
    expect(events[0]?.org_id).toBe('org-ops-a');
    expect(JSON.parse(events[0]?.body ?? '{}')).toMatchObject({
      id: events[0]?.id,
      type: 'webhook.endpoint.disabled',
      data: {
        endpointId: endpoint.id,
        url: receiver.url('/health'),
        reason: 'maintenance until Monday',
        disabledAt: disabled.body.data.disableWebhookEndpoint.disabledAt,
      },
    });

    // The engine's failure streak and pause, as it would have left them.
    await api.app.database.db
      .updateTable('webhook_endpoints')
      .set({ failing_since: new Date(Date.now() - 60_000), paused_until: new Date(Date.now() + 60_000) })
      .where('id', '=', endpoint.id)
      .execute();
    const enabled = await api.graphql(ENABLE, { id: endpoint.id }, alice);
    expect(enabled.body.data.enableWebhookEndpoint).toMatchObject({
      status: 'ENABLED',
      disabledAt: null,
      disabledReason: null,
      failingSince: null,
      pausedUntil: null,
    });
    const listed = await api.graphql(ENDPOINTS, { orgId: 'org-ops-a' }, alice);
    expect(listed.body.data.webhookEndpoints).toContainEqual(enabled.body.data.enableWebhookEndpoint);
  });

  it('refuses an over-long reason with BAD_USER_INPUT and leaves the endpoint enabled', async () => {
    const { endpoint } = await createEndpoint('/reason');
    const { body } = await api.graphql(DISABLE, { id: endpoint.id, reason: 'x'.repeat(501) }, alice);
    expect(errorCode(body)).toBe('BAD_USER_INPUT');
    expect((await log({ id: endpoint.id })).status).toBe('ENABLED');
  });
});

describe("another organisation's admin", () => {
  it('gets NOT_FOUND, exactly as for an unknown id, from every endpoint operation, and changes nothing', async () => {
    const { endpoint } = await createEndpoint('/tenancy');
    for (const document of [DISABLE, ENABLE, SEND_TEST, REPLAY_DEAD]) {
      const foreign = await api.graphql(document, { id: endpoint.id }, mallory);
      const unknown = await api.graphql(document, { id: 'we_unknown' }, mallory);
      expect(errorCode(foreign.body)).toBe('NOT_FOUND');
      expect(foreign.body.errors?.[0]?.message).toBe(unknown.body.errors?.[0]?.message);
    }
    const { body } = await api.graphql(LOG, { id: endpoint.id }, mallory);
    expect(body).toEqual({ data: { webhookEndpoint: null } });
    const mine = await log({ id: endpoint.id });
    expect(mine.status).toBe('ENABLED');
    expect(mine.deliveries.edges).toEqual([]);
    expect(receiver.requestsTo('/tenancy')).toEqual([]);
  });

  it('gets NOT_FOUND, like its owner, for a deleted endpoint', async () => {
    const { endpoint } = await createEndpoint('/deleted');
    const deleted = await api.graphql(
      'mutation($id: ID!) { deleteWebhookEndpoint(id: $id) }',
      { id: endpoint.id },
      alice,
    );
    expect(deleted.body.data.deleteWebhookEndpoint).toBe(true);
    for (const token of [alice, mallory]) {
      for (const document of [DISABLE, ENABLE, SEND_TEST, REPLAY_DEAD]) {
        expect(errorCode((await api.graphql(document, { id: endpoint.id }, token)).body)).toBe('NOT_FOUND');
      }
    }
  });

  it('is FORBIDDEN to list the organisation, and anonymous callers are UNAUTHENTICATED', async () => {
    expect(errorCode((await api.graphql(ENDPOINTS, { orgId: 'org-ops-a' }, mallory)).body)).toBe('FORBIDDEN');
    const { endpoint } = await createEndpoint('/anonymous');
    for (const document of [DISABLE, ENABLE, SEND_TEST, REPLAY_DEAD]) {
      expect(errorCode((await api.graphql(document, { id: endpoint.id })).body)).toBe('UNAUTHENTICATED');
    }
  });
});

describe('sendTestWebhook', () => {
  it('returns the webhook.test delivery at once and delivers it, signed in both schemes, to that endpoint only', async () => {
    const { endpoint, secret } = await createEndpoint('/test-send');
    const other = await createEndpoint('/test-other');
    const { body } = await api.graphql(SEND_TEST, { id: endpoint.id }, alice);
    expect(body.errors).toBeUndefined();
    const delivery = body.data.sendTestWebhook;
    expect(delivery).toMatchObject({ eventType: 'webhook.test', endpointId: endpoint.id, status: 'PENDING' });
    expect(delivery.eventId).toMatch(/^evt_/);

    const done = await waitForLog(
      { id: endpoint.id, eventId: delivery.eventId },
      (found) => found.deliveries.edges[0]?.node.status === 'SUCCEEDED',
    );
    expect(done.deliveries.edges.map((edge: any) => edge.node.id)).toEqual([delivery.id]);
    const [request, ...more] = receiver.requestsTo('/test-send');
    expect(more).toEqual([]);
    for (const scheme of ['standard', 'stripe'] as const) {
      const event = verifyWebhook({ rawBody: request!.body, headers: request!.headers, secrets: [secret], scheme });
      expect(event).toMatchObject({ id: delivery.eventId, type: 'webhook.test', data: { endpointId: endpoint.id } });
    }
    expect(receiver.requestsTo('/test-other')).toEqual([]);
    expect((await log({ id: other.endpoint.id })).deliveries.edges).toEqual([]);
  });

  it('refuses a sixth test event while five are pending, with BAD_USER_INPUT and nothing recorded', async () => {
    const { endpoint } = await createEndpoint('/test-flood');
    // Pending and not due for an hour, as if the receiver kept failing; the lease cleared, so an attempt
    // already in flight cannot record another state over it (the engine compares leases).
    for (let i = 0; i < 5; i++) {
      const { body } = await api.graphql(SEND_TEST, { id: endpoint.id }, alice);
      await api.app.database.db
        .updateTable('webhook_deliveries')
        .set({
          status: 'PENDING',
          next_attempt_at: new Date(Date.now() + 3_600_000),
          lease_token: null,
          leased_until: null,
        })
        .where('id', '=', body.data.sendTestWebhook.id)
        .execute();
    }
    const refused = await api.graphql(SEND_TEST, { id: endpoint.id }, alice);
    expect(errorCode(refused.body)).toBe('BAD_USER_INPUT');
    const rows = await api.app.database.db
      .selectFrom('webhook_deliveries')
      .select('id')
      .where('endpoint_id', '=', endpoint.id)
      .execute();
    expect(rows).toHaveLength(5);
  });

  it('records a SKIPPED delivery, never due, for a disabled endpoint', async () => {
    const { endpoint } = await createEndpoint('/test-disabled');
    await api.graphql(DISABLE, { id: endpoint.id }, alice);
    const { body } = await api.graphql(SEND_TEST, { id: endpoint.id }, alice);
    expect(body.data.sendTestWebhook).toMatchObject({ eventType: 'webhook.test', status: 'SKIPPED', attempts: [] });
    const row = await api.app.database.db
      .selectFrom('webhook_deliveries')
      .select(['status', 'next_attempt_at'])
      .where('id', '=', body.data.sendTestWebhook.id)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ status: 'SKIPPED', next_attempt_at: null });
  });
});

describe('replayDeadWebhookDeliveries', () => {
  it('replays every dead delivery of the endpoint, each arriving once, and counts them', async () => {
    const { endpoint } = await createEndpoint('/dead-letters');
    const bystander = await createEndpoint('/dead-bystander');
    receiver.answer('/dead-letters', 500);
    receiver.answer('/dead-bystander', 500);
    await api.createAndPublish(alice, 'org-ops-a', 'first');
    await api.createAndPublish(alice, 'org-ops-a', 'second');
    const dead = await waitForLog({ id: endpoint.id, status: 'DEAD' }, (found) => found.deliveries.edges.length === 2);
    await waitForLog({ id: bystander.endpoint.id, status: 'DEAD' }, (found) => found.deliveries.edges.length === 2);
    const deadIds = dead.deliveries.edges.map((edge: any) => edge.node.eventId).sort();

    receiver.answer('/dead-letters', 200);
    const before = receiver.requestsTo('/dead-letters').length;
    const { body } = await api.graphql(REPLAY_DEAD, { id: endpoint.id }, alice);
    expect(body).toEqual({ data: { replayDeadWebhookDeliveries: 2 } });
    await waitForLog({ id: endpoint.id, status: 'SUCCEEDED' }, (found) => found.deliveries.edges.length === 2);
    const after = receiver
      .requestsTo('/dead-letters')
      .slice(before)
      .map((request) => String(request.headers['webhook-id']))
      .sort();
    expect(after).toEqual(deadIds);
    // Nothing left to replay, and another endpoint's dead letters were not touched.
    expect((await api.graphql(REPLAY_DEAD, { id: endpoint.id }, alice)).body.data.replayDeadWebhookDeliveries).toBe(0);
    expect((await log({ id: bystander.endpoint.id, status: 'DEAD' })).deliveries.edges).toHaveLength(2);
  });

  it('refuses to replay into a disabled endpoint with BAD_USER_INPUT', async () => {
    const { endpoint } = await createEndpoint('/dead-disabled');
    await api.graphql(DISABLE, { id: endpoint.id }, alice);
    expect(errorCode((await api.graphql(REPLAY_DEAD, { id: endpoint.id }, alice)).body)).toBe('BAD_USER_INPUT');
  });
});

describe('the delivery log', () => {
  let endpointId: string;
  let logToken: string;
  const events: Array<{ id: string; type: string; createdAt: Date }> = [];

  beforeAll(async () => {
    // Events, deliveries and attempts written directly (the log is a read model), in an organisation
    // of their own and marked dispatched so the dispatcher leaves them alone. One hour apart, oldest first.
    const token = await api.token({ sub: 'lola', name: 'Lola', orgs: ['org-ops-log'] });
    const created = await api.graphql(
      CREATE,
      { input: { orgId: 'org-ops-log', url: receiver.url('/log-only'), eventTypes: ['post.published'] } },
      token,
    );
    endpointId = created.body.data.createWebhookEndpoint.endpoint.id;
    logToken = token;
    const db = api.app.database.db;
    const start = Date.now() - 10 * 3_600_000;
    for (let i = 0; i < 5; i++) {
      const type = i % 2 === 0 ? 'post.published' : 'webhook.test';
      const createdAt = new Date(start + i * 3_600_000);
      const id = `evt_log${i}_${endpointId}`;
      const deliveryId = `del_log${i}_${endpointId}`;
      events.push({ id, type, createdAt });
      await sql`insert into webhook_outbox (id, org_id, type, body, created_at, relayed_at, dispatched_at)
        values (${id}, 'org-ops-log', ${type}, '{}', ${createdAt}, now(), now())`.execute(db);
      await sql`insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, status, next_attempt_at, attempt_count, created_at)
        values (${deliveryId}, ${id}, ${endpointId}, 'org-ops-log', ${type}, ${i === 4 ? 'SUCCEEDED' : 'DEAD'}, null, 1, ${createdAt})`.execute(
        db,
      );
      await db
        .insertInto('webhook_attempts')
        .values({
          delivery_id: deliveryId,
          at: new Date(createdAt.getTime() + 1_000),
          status_code: i === 4 ? 200 : 503,
          duration_ms: 12,
          error: i === 4 ? null : 'HTTP 503',
          response_body: i === 4 ? '{"ok":true}' : 'upstream unavailable',
        })
        .execute();
    }
  });

  const logAs = (variables: Record<string, unknown>) => log(variables, logToken);
  const ids = (endpoint: any) => endpoint.deliveries.edges.map((edge: any) => edge.node.eventId);

  it('filters by status, event type, event id and time range, newest first', async () => {
    expect(ids(await logAs({ id: endpointId }))).toEqual(events.map((event) => event.id).reverse());
    expect(ids(await logAs({ id: endpointId, status: 'SUCCEEDED' }))).toEqual([events[4]?.id]);
    expect(ids(await logAs({ id: endpointId, eventType: 'webhook.test' }))).toEqual([events[3]?.id, events[1]?.id]);
    expect(ids(await logAs({ id: endpointId, eventId: events[2]?.id }))).toEqual([events[2]?.id]);
    expect(
      ids(
        await logAs({
          id: endpointId,
          createdAfter: events[1]?.createdAt.toISOString(),
          createdBefore: events[3]?.createdAt.toISOString(),
        }),
      ),
    ).toEqual([events[2]?.id, events[1]?.id]);
    expect(ids(await logAs({ id: endpointId, status: 'DEAD', eventType: 'post.published' }))).toEqual([
      events[2]?.id,
      events[0]?.id,
    ]);
    expect(ids(await logAs({ id: endpointId, eventId: 'evt_nobody' }))).toEqual([]);
  });

  it('pages a filtered log with cursors, without gaps or repeats', async () => {
    const first = await logAs({ id: endpointId, status: 'DEAD', first: 2 });
    expect(first.deliveries.pageInfo.hasNextPage).toBe(true);
    const rest = await logAs({ id: endpointId, status: 'DEAD', first: 2, after: first.deliveries.pageInfo.endCursor });
    expect(rest.deliveries.pageInfo.hasNextPage).toBe(false);
    expect([...ids(first), ...ids(rest)]).toEqual(
      events
        .slice(0, 4)
        .map((event) => event.id)
        .reverse(),
    );
  });

  it("shows each attempt's status code, error and the first bytes of the response", async () => {
    const endpoint = await logAs({ id: endpointId, first: 2 });
    expect(endpoint.deliveries.edges.map((edge: any) => edge.node.attempts)).toEqual([
      [{ statusCode: 200, error: null, responseBody: '{"ok":true}' }],
      [{ statusCode: 503, error: 'HTTP 503', responseBody: 'upstream unavailable' }],
    ]);
  });

  it('gives the recent success rate over the latest attempts, null without attempts, for a whole list at once', async () => {
    expect((await logAs({ id: endpointId })).successRate).toBeCloseTo(1 / 5);
    expect((await logAs({ id: endpointId, lastAttempts: 1 })).successRate).toBe(1);
    expect((await logAs({ id: endpointId, lastAttempts: 2 })).successRate).toBe(0.5);
    const fresh = await createEndpoint('/log-fresh');
    expect((await log({ id: fresh.endpoint.id })).successRate).toBeNull();
    const listed = await api.graphql(
      'query($orgId: ID!) { webhookEndpoints(orgId: $orgId) { id successRate(lastAttempts: 3) } }',
      { orgId: 'org-ops-log' },
      logToken,
    );
    expect(listed.body.data.webhookEndpoints).toEqual([{ id: endpointId, successRate: 1 / 3 }]);
  });

  it.each([
    ['a reversed time range', { createdAfter: '2026-11-23T12:00:00Z', createdBefore: '2026-11-23T11:00:00Z' }],
    ['a malformed DateTime', { createdAfter: 'yesterday' }],
    ['an over-long event type', { eventType: 'x'.repeat(201) }],
    ['a success rate over 0 attempts', { lastAttempts: 0 }],
    ['a garbled cursor', { after: 'not-a-cursor' }],
  ])('refuses %s with BAD_USER_INPUT', async (_case, variables) => {
    const { body } = await api.graphql(LOG, { id: endpointId, ...variables }, logToken);
    expect(errorCode(body)).toBe('BAD_USER_INPUT');
  });
});

describe('an endpoint that asks for ED25519 (v1a) signatures', () => {
  it('gets the whpk_ public key once, and deliveries a receiver verifies with it alone; rotation keeps the scheme', async () => {
    const { body } = await api.graphql(
      'mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { secret signatureScheme endpoint { id } } }',
      {
        input: {
          orgId: 'org-ops-a',
          url: receiver.url('/ed25519'),
          eventTypes: ['post.published'],
          signatureScheme: 'ED25519',
        },
      },
      alice,
    );
    expect(body.errors).toBeUndefined();
    const { secret: publicKey, signatureScheme, endpoint } = body.data.createWebhookEndpoint;
    expect(signatureScheme).toBe('ED25519');
    expect(publicKey).toMatch(/^whpk_[A-Za-z0-9+/]{43}=$/);
    // Herald keeps the signing key, sealed: it opens to a `whsk_` key, and the row holds no plaintext.
    const [signingKey] = await listActiveWebhookSecrets(api.app.database.db, endpoint.id, TEST_KEYRING);
    expect(signingKey).toMatch(/^whsk_/);
    const stored = await api.app.database.db
      .selectFrom('webhook_endpoint_secrets')
      .select(['secret', 'sealed_secret'])
      .where('endpoint_id', '=', endpoint.id)
      .executeTakeFirstOrThrow();
    expect(stored.secret).toBeNull();
    expect(stored.sealed_secret).not.toContain(signingKey!.slice('whsk_'.length));

    const sent = await api.graphql(SEND_TEST, { id: endpoint.id }, alice);
    await waitForLog(
      { id: endpoint.id, eventId: sent.body.data.sendTestWebhook.eventId },
      (found) => found.deliveries.edges[0]?.node.status === 'SUCCEEDED',
    );
    const [request] = receiver.requestsTo('/ed25519');
    expect(request!.headers['x-webhook-signature']).toBeUndefined();
    expect(String(request!.headers['webhook-signature'])).toMatch(/^v1a,/);
    expect(verifyWebhook({ rawBody: request!.body, headers: request!.headers, publicKeys: [publicKey] })).toMatchObject(
      {
        type: 'webhook.test',
      },
    );

    const rotated = await api.graphql(
      'mutation($id: ID!) { rotateWebhookSecret(id: $id) { secret signatureScheme } }',
      { id: endpoint.id },
      alice,
    );
    expect(rotated.body.data.rotateWebhookSecret).toMatchObject({ signatureScheme: 'ED25519' });
    expect(rotated.body.data.rotateWebhookSecret.secret).toMatch(/^whpk_/);
    expect(rotated.body.data.rotateWebhookSecret.secret).not.toBe(publicKey);
  });
});

describe('rotating a secret this server cannot open', () => {
  it('is refused with BAD_USER_INPUT naming signatureScheme, not a 500; with the scheme given it rotates', async () => {
    const created = await api.graphql(
      CREATE,
      { input: { orgId: 'org-ops-a', url: receiver.url('/sealed-elsewhere'), eventTypes: ['post.published'] } },
      alice,
    );
    const endpointId = created.body.data.createWebhookEndpoint.endpoint.id as string;
    // Sealed under a key this server's HERALD_ENCRYPTION_KEYS does not hold (a dispatcher's newer keyring).
    const elsewhere = sealSecret(
      [{ id: 'elsewhere', key: randomBytes(32) }],
      endpointId,
      'whsec_c2VhbGVkIGVsc2V3aGVyZQ==',
    );
    await api.app.database.db
      .updateTable('webhook_endpoint_secrets')
      .set({ sealed_secret: elsewhere })
      .where('endpoint_id', '=', endpointId)
      .execute();
    const ROTATE =
      'mutation($id: ID!, $scheme: WebhookSignatureScheme) { rotateWebhookSecret(id: $id, signatureScheme: $scheme) { secret signatureScheme } }';

    const refused = await api.graphql(ROTATE, { id: endpointId }, alice);
    expect(refused.status).toBe(200);
    expect(refused.body.data).toBeNull();
    expect(refused.body.errors?.[0]).toMatchObject({
      message: expect.stringContaining('pass signatureScheme'),
      extensions: { code: 'BAD_USER_INPUT', field: 'signatureScheme' },
    });
    // Nothing was changed: the sealed secret still signs, with no expiry.
    const kept = await api.app.database.db
      .selectFrom('webhook_endpoint_secrets')
      .select(['sealed_secret', 'expires_at'])
      .where('endpoint_id', '=', endpointId)
      .execute();
    expect(kept).toEqual([{ sealed_secret: elsewhere, expires_at: null }]);

    const rotated = await api.graphql(ROTATE, { id: endpointId, scheme: 'HMAC_SHA256' }, alice);
    expect(rotated.body.errors).toBeUndefined();
    expect(rotated.body.data.rotateWebhookSecret).toMatchObject({ signatureScheme: 'HMAC_SHA256' });
    expect(rotated.body.data.rotateWebhookSecret.secret).toMatch(/^whsec_/);
  });
});
