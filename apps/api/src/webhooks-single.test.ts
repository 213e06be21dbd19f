import { createOutboxListener } from '@herald/webhook-engine';
import { startTestReceiver, type TestReceiver } from '@herald/webhook-engine/testing';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from './testing/test-api.js';

// Single mode (DATABASE_URL, no REDIS_URL): the dispatcher runs in the API process, and publishPost wakes
// it there after the commit instead of sending the outbox NOTIFY, which would make PostgreSQL commit
// notifying transactions one at a time.

let api: TestApi;
let receiver: TestReceiver;
let token: string;

beforeAll(async () => {
  api = await startTestApi({
    databaseUrl: inject('databaseUrl'),
    env: { WEBHOOK_TIMEOUT_MS: '2000', WEBHOOK_ALLOW_PRIVATE_URLS: 'true' },
  });
  receiver = await startTestReceiver();
  token = await api.token({ sub: 'sam', name: 'Sam', orgs: ['single'] });
});

afterAll(async () => {
  await receiver?.close();
  await api?.close();
});

describe('single mode', () => {
  it('delivers post.published from the in-process dispatcher without an outbox NOTIFY', async () => {
    expect(api.config.mode).toBe('single');
    const created = await api.graphql(
      'mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }',
      { input: { orgId: 'single', url: receiver.url('/single'), eventTypes: ['post.published'] } },
      token,
    );
    expect(created.body.errors).toBeUndefined();
    // A LISTEN connection on the API's schema, as the dispatcher's own would be.
    let heard = 0;
    const listener = createOutboxListener({
      databaseUrl: api.config.database.kind === 'postgres' ? api.config.database.url : '',
      logger: pino({ level: 'silent' }),
      onEvent: () => heard++,
    });
    await listener.start();
    try {
      const afterStart = heard; // one wake-up at start, for anything committed before
      const post = await api.graphql(
        'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
        { input: { orgId: 'single', title: 'Quietly', tags: [] } },
        token,
      );
      const published = await api.graphql(
        'mutation($id: ID!) { publishPost(id: $id) { id } }',
        { id: post.body.data.createPost.id },
        token,
      );
      expect(published.body.errors).toBeUndefined();
      await receiver.waitFor(() => receiver.requestsTo('/single').length === 1);
      expect(JSON.parse(receiver.requestsTo('/single')[0]!.body)).toMatchObject({
        type: 'post.published',
        data: { id: post.body.data.createPost.id, title: 'Quietly' },
      });
      expect(heard).toBe(afterStart);
    } finally {
      await listener.stop();
    }
  });
});
