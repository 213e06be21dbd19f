import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { openAckedSocket } from './testing/raw-socket.js';
import { startTestApi, type TestApi } from './testing/test-api.js';

const CREATE_POST = 'mutation($input: CreatePostInput!) { createPost(input: $input) { id title tags } }';
const POSTS = 'query($orgId: ID!) { posts(orgId: $orgId, first: 100) { edges { node { id title } } } }';
const CREATE_ENDPOINT =
  'mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }';
const ENDPOINTS = 'query($orgId: ID!) { webhookEndpoints(orgId: $orgId) { id } }';
const NUL = '\u0000';
const LONE_SURROGATE = '\uD800';

let api: TestApi;
let alice: string;

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl'), listen: true });
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-text'] });
});

afterAll(() => api?.close());

async function postCount(): Promise<number> {
  const { body } = await api.graphql(POSTS, { orgId: 'org-text' }, alice);
  return body.data.posts.edges.length;
}

describe('NUL bytes and invalid UTF-16 in text arguments are BAD_USER_INPUT, nothing stored', () => {
  it.each([
    ['a NUL in the title', { title: `before${NUL}after`, tags: [] }, 'input.title'],
    ['a NUL in a tag', { title: 'fine', tags: ['ok', `t${NUL}`] }, 'input.tags.1'],
    ['an unpaired surrogate in the title', { title: `broken ${LONE_SURROGATE} text`, tags: [] }, 'input.title'],
  ])('createPost with %s', async (_name, fields, variable) => {
    const before = await postCount();
    const { status, body } = await api.graphql(CREATE_POST, { input: { orgId: 'org-text', ...fields } }, alice);
    expect(status).toBe(200);
    expect(body.data ?? null).toBeNull();
    expect(body.errors?.[0]?.extensions).toMatchObject({ code: 'BAD_USER_INPUT', variable });
    expect(await postCount()).toBe(before);
  });

  it('createPost with a NUL escaped in a document literal', async () => {
    const before = await postCount();
    const { body } = await api.graphql(
      'mutation { createPost(input: { orgId: "org-text", title: "x\\u0000y", tags: [] }) { id } }',
      {},
      alice,
    );
    expect(body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT');
    expect(await postCount()).toBe(before);
  });

  it('createWebhookEndpoint with a NUL in the URL or an event type', async () => {
    for (const input of [
      { url: `https://example.com/hook${NUL}`, eventTypes: ['post.published'] },
      { url: 'https://example.com/hook', eventTypes: [`post.published${NUL}`] },
    ]) {
      const { body } = await api.graphql(CREATE_ENDPOINT, { input: { orgId: 'org-text', ...input } }, alice);
      expect(body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT');
      expect(body.errors?.[0]?.extensions?.variable).toMatch(/^input\.(url|eventTypes\.0)$/);
    }
    const { body } = await api.graphql(ENDPOINTS, { orgId: 'org-text' }, alice);
    expect(body.data.webhookEndpoints).toEqual([]);
  });

  it('over WebSocket: a subscription whose tags hold a NUL is refused with BAD_USER_INPUT, the socket stays open', async () => {
    const socket = await openAckedSocket(`${api.baseUrl!.replace('http', 'ws')}/graphql`, { authToken: alice });
    socket.send({
      id: 's',
      type: 'subscribe',
      payload: {
        query: 'subscription($tags: [String!]) { postPublished(orgId: "org-text", tags: $tags) { id } }',
        variables: { tags: [`a${NUL}`] },
      },
    });
    const answer = await socket.next();
    const errors = answer.type === 'error' ? answer.payload : answer.payload.errors;
    expect(errors[0].extensions.code).toBe('BAD_USER_INPUT');
    socket.send({ type: 'ping' });
    await socket.next('pong');
    socket.socket.close();
  });

  it('well-formed text outside the BMP (paired surrogates) is stored as sent', async () => {
    const title = '📣 launch – naïve café';
    const { body } = await api.graphql(CREATE_POST, { input: { orgId: 'org-text', title, tags: ['🏷️'] } }, alice);
    expect(body.errors).toBeUndefined();
    expect(body.data.createPost).toMatchObject({ title, tags: ['🏷️'] });
  });
});
