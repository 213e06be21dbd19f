import { randomUUID } from 'node:crypto';
import { signToken } from '@herald/auth';
import { createOwnDatabase, type OwnDatabase } from '@herald/testing';
import { waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { type DispatcherProcess, startDispatcherProcess } from './support/dispatcher-process.js';
import { postGraphql } from './support/graphql-http.js';
import { createPostPublishedEndpoint, startWebhookReceiver, type WebhookReceiver } from './support/webhooks.js';

// Cluster mode during a PostgreSQL failover: the webhook-dispatcher app (separate process) and the API
// both lose every connection to their own database while posts are published and webhooks delivered.
// Neither exits (the shared `createDatabase` hears every connection's 'error'), and every post whose
// publish succeeded reaches the receiver afterwards.

const JWT_SECRET = 'dispatcher-loss-test-secret-0123456789ab';
const ORG = `org-${randomUUID()}`;
const POSTS = 30;
const TERMINATE_EVERY_N_POSTS = 5;
/** Bound on redelivering what a termination cut (leases and the 5 s requeue below). */
const DELIVERY_TIMEOUT_MS = 90_000;

let own: OwnDatabase;
let api: ApiProcess;
let dispatcher: DispatcherProcess;
let receiver: WebhookReceiver;
let token: string;

beforeAll(async () => {
  own = await createOwnDatabase(inject('databaseUrl'));
  receiver = await startWebhookReceiver();
  const env = {
    DATABASE_URL: own.url,
    REDIS_URL: inject('redisUrl'),
    HERALD_REDIS_PREFIX: `${own.name}:`,
    JWT_SECRET,
    WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
    WEBHOOK_TIMEOUT_MS: '2000',
    WEBHOOK_RETRY_BASE_MS: '100',
  };
  token = await signToken(JWT_SECRET, { sub: 'writer', name: 'Writer', orgs: [ORG] });
  api = await startApiProcess(env);
  dispatcher = await startDispatcherProcess({
    ...env,
    NODE_ENV: 'test',
    WEBHOOK_POLL_INTERVAL_MS: '100',
  });
  await createPostPublishedEndpoint(api.baseUrl, token, ORG, receiver.url);
}, 180_000);

afterAll(async () => {
  await dispatcher?.stop('SIGTERM');
  await api?.stop('SIGTERM');
  await receiver?.close();
  await own?.drop();
});

describe('the dispatcher app during a PostgreSQL failover', () => {
  it('never exits, and every published post reaches the receiver afterwards', {
    timeout: DELIVERY_TIMEOUT_MS + 60_000,
  }, async () => {
    const published: string[] = [];
    let terminated = 0;
    for (let i = 0; i < POSTS; i++) {
      if (i % TERMINATE_EVERY_N_POSTS === 0) terminated += await own.terminateBackends();
      const created = await postGraphql(
        api.baseUrl,
        token,
        'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
        { input: { orgId: ORG, title: `post ${i}` } },
      );
      if (created.status !== 200) continue;
      const done = await postGraphql(api.baseUrl, token, 'mutation($id: ID!) { publishPost(id: $id) { id } }', {
        id: created.body.data.createPost.id,
      });
      if (done.status === 200 && !done.body.errors) published.push(done.body.data.publishPost.id as string);
    }
    expect(terminated).toBeGreaterThan(0);
    expect(published.length).toBeGreaterThan(0);

    await waitFor(
      'every published post to reach the receiver',
      () => published.every((id) => receiver.received.has(id)),
      {
        timeoutMs: DELIVERY_TIMEOUT_MS,
        intervalMs: 200,
      },
    );
    expect(dispatcher.child.exitCode).toBeNull();
    expect(api.child.exitCode).toBeNull();
  });
});
