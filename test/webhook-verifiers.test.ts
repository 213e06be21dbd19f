import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sealSecret } from '@herald/db';
import { TEST_KEYRING } from '@herald/testing';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { Webhook as SvixWebhook } from 'svix';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from '../apps/api/src/testing/test-api.js';

// Deliveries made by Herald's own engine (the API's in-process dispatcher, real PostgreSQL),
// received over HTTP on 127.0.0.1, verify with the npm libraries receivers already use: Standard
// Webhooks' `standardwebhooks`, `svix` and Stripe's `constructEvent`, before, during and after a secret
// rotation, and for an endpoint whose secret was issued in the old base64url form.

const stripe = new Stripe('sk_test_offline_never_used');
/** A secret as Herald issued them before Standard Webhooks (base64url), which `standardwebhooks` refuses. */
const LEGACY_SECRET = `whsec_${Buffer.alloc(32, 0xfb).toString('base64url')}`;

interface Received {
  path: string;
  rawBody: Buffer;
  headers: IncomingHttpHeaders;
}

let api: TestApi;
let server: Server;
let baseUrl: string;
let token: string;
const received: Received[] = [];

beforeAll(async () => {
  api = await startTestApi({
    databaseUrl: inject('databaseUrl'),
    env: { WEBHOOK_ALLOW_PRIVATE_URLS: 'true', WEBHOOK_TIMEOUT_MS: '2000' },
  });
  token = await api.token({ sub: 'vera', name: 'Vera', orgs: ['org-verifiers'] });
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      received.push({ path: req.url ?? '/', rawBody: Buffer.concat(chunks), headers: req.headers });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await api.close();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

async function graphql(query: string, variables: Record<string, unknown>) {
  const { body } = await api.graphql(query, variables, token);
  expect(body.errors).toBeUndefined();
  return body.data;
}

async function createEndpoint(path: string): Promise<{ id: string; secret: string }> {
  const data = await graphql(
    'mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { secret endpoint { id } } }',
    { input: { orgId: 'org-verifiers', url: `${baseUrl}${path}`, eventTypes: ['post.published'] } },
  );
  return { id: data.createWebhookEndpoint.endpoint.id, secret: data.createWebhookEndpoint.secret };
}

/** Publishes a post and waits (bounded: 15 s) for its delivery to reach `path`. */
async function publishAndReceive(path: string, title: string): Promise<Received> {
  const before = received.filter((request) => request.path === path).length;
  await api.createAndPublish(token, 'org-verifiers', title);
  for (let i = 0; i < 750; i++) {
    const mine = received.filter((request) => request.path === path);
    if (mine.length > before) return mine[before]!;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`no delivery reached ${path}`);
}

/** The event as each library returns it; throws if any library refuses the delivery. */
function verifyWithEveryLibrary(delivery: Received, stripeSecret: string, standardSecret: string): unknown[] {
  const body = delivery.rawBody.toString('utf8');
  const headers = Object.fromEntries(
    Object.entries(delivery.headers).flatMap(([name, value]) => (typeof value === 'string' ? [[name, value]] : [])),
  );
  return [
    new StandardWebhook(standardSecret).verify(body, headers),
    new SvixWebhook(standardSecret).verify(body, headers),
    stripe.webhooks.constructEvent(delivery.rawBody, headers['x-webhook-signature']!, stripeSecret),
  ];
}

describe('deliveries from the engine, verified by standardwebhooks, svix and stripe', () => {
  it('before, during and after a rotation, with each secret on its own', async () => {
    const endpoint = await createEndpoint('/rotation');
    const first = await publishAndReceive('/rotation', 'before rotation');
    const event = JSON.parse(first.rawBody.toString('utf8'));
    expect(verifyWithEveryLibrary(first, endpoint.secret, endpoint.secret)).toEqual([event, event, event]);

    const rotated = await graphql('mutation($id: ID!) { rotateWebhookSecret(id: $id) { secret } }', {
      id: endpoint.id,
    });
    const next: string = rotated.rotateWebhookSecret.secret;
    const during = await publishAndReceive('/rotation', 'during rotation');
    const duringEvent = JSON.parse(during.rawBody.toString('utf8'));
    expect(String(during.headers['webhook-signature']).split(' ')).toHaveLength(2);
    expect(verifyWithEveryLibrary(during, endpoint.secret, endpoint.secret)).toEqual(Array(3).fill(duringEvent));
    expect(verifyWithEveryLibrary(during, next, next)).toEqual(Array(3).fill(duringEvent));

    // The grace period over: only the new secret signs, and the old one is refused by every library.
    const [original] = await api.app.database.db
      .selectFrom('webhook_endpoint_secrets')
      .select('id')
      .where('endpoint_id', '=', endpoint.id)
      .orderBy('id')
      .limit(1)
      .execute();
    await api.app.database.db
      .updateTable('webhook_endpoint_secrets')
      .set({ expires_at: new Date(Date.now() - 1_000) })
      .where('id', '=', original!.id)
      .execute();
    const after = await publishAndReceive('/rotation', 'after rotation');
    const afterEvent = JSON.parse(after.rawBody.toString('utf8'));
    expect(verifyWithEveryLibrary(after, next, next)).toEqual(Array(3).fill(afterEvent));
    expect(() => verifyWithEveryLibrary(after, endpoint.secret, next)).toThrow();
    expect(() => verifyWithEveryLibrary(after, next, endpoint.secret)).toThrow();
  });

  it('for a secret issued in the old base64url form: Stripe with it as is, the standard libraries with its key in standard base64 (what toStandardWebhookSecret derives)', async () => {
    const endpoint = await createEndpoint('/legacy');
    await api.app.database.db
      .updateTable('webhook_endpoint_secrets')
      .set({ sealed_secret: sealSecret(TEST_KEYRING, endpoint.id, LEGACY_SECRET) })
      .where('endpoint_id', '=', endpoint.id)
      .execute();
    const standardSecret = `whsec_${Buffer.from(LEGACY_SECRET.slice('whsec_'.length), 'base64url').toString('base64')}`;
    expect(standardSecret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(() => new StandardWebhook(LEGACY_SECRET)).toThrow();

    const delivery = await publishAndReceive('/legacy', 'legacy secret');
    const event = JSON.parse(delivery.rawBody.toString('utf8'));
    expect(verifyWithEveryLibrary(delivery, LEGACY_SECRET, standardSecret)).toEqual([event, event, event]);
  });
});
