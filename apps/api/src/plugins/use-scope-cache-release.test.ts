import { RequestCache } from '@pothos/plugin-scope-auth';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { builder } from '../schema/builder.js';
import { startTestApi, type TestApi } from '../testing/test-api.js';

const POSTS = 'query Posts($orgId: ID!) { posts(orgId: $orgId, first: 10) { edges { node { id title } } } }';

let api: TestApi;
let token: string;

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl'), listen: true, env: { NODE_ENV: 'production' } });
  token = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-a'] });
  await api.createAndPublish(token, 'org-a', 'hello', ['t']);
}, 60_000);

afterAll(() => api?.close());

/** The scope-auth caches Pothos makes while `run` runs, with the context each belongs to. */
async function cachesMadeDuring(run: () => Promise<void>): Promise<Array<{ context: object; cache: unknown }>> {
  const made: Array<{ context: object; cache: unknown }> = [];
  const original = RequestCache.fromContext.bind(RequestCache);
  const spy = vi.spyOn(RequestCache, 'fromContext').mockImplementation((context, schemaBuilder) => {
    const cache = original(context, schemaBuilder);
    if (!made.some((entry) => entry.context === context)) made.push({ context, cache });
    return cache;
  });
  try {
    await run();
  } finally {
    spy.mockRestore();
  }
  return made;
}

async function posts(): Promise<void> {
  const response = await fetch(`${api.baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: POSTS, variables: { orgId: 'org-a' } }),
  });
  const body = (await response.json()) as { data?: unknown; errors?: unknown };
  expect(body.errors).toBeUndefined();
}

describe('scope-auth cache release', () => {
  // Kept, the cache's WeakMap entry keeps the context (and the request, response and results it holds)
  // alive through young-generation GCs: see releaseScopeCache in schema/builder.ts.
  it.each([
    ['through Yoga (first time the document is seen)', 1],
    ['on the HTTP fast path (the document accepted before)', 2],
  ])('holds no scope cache for a request context once it is answered, %s', async (_route, requests) => {
    const made = await cachesMadeDuring(async () => {
      for (let k = 0; k < requests; k++) await posts();
    });
    expect(made.length).toBeGreaterThanOrEqual(1);
    for (const { context, cache } of made) {
      // Asked again, Pothos makes a fresh cache: the request's own was dropped.
      expect(RequestCache.fromContext(context, builder as never)).not.toBe(cache);
      RequestCache.clearForContext(context);
    }
  });
});
