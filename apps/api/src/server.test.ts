import { SignJWT, UnsecuredJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from './testing/test-api.js';

let api: TestApi;
let token: string;

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl') });
  token = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-a'] });
});

afterAll(() => api.close());

const post = (body: BodyInit, headers: Record<string, string> = {}) =>
  api.fetch('/graphql', { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });

/** After every refusal the server must still answer a well-formed request. */
async function expectStillServing() {
  const { status, body } = await api.graphql('{ me { id } }', {}, token);
  expect(status).toBe(200);
  expect(body.data.me.id).toBe('alice');
}

describe('health and readiness', () => {
  it('/health answers 200', async () => {
    expect((await api.fetch('/health')).status).toBe(200);
  });

  it('/readiness answers 200 while the database answers, 503 once draining', async () => {
    const other = await startTestApi();
    try {
      expect((await other.fetch('/readiness')).status).toBe(200);
      other.app.drain();
      expect((await other.fetch('/readiness')).status).toBe(503);
      expect((await other.fetch('/health')).status).toBe(200);
    } finally {
      await other.close();
    }
  });

  it('/readiness answers 503 when the database is gone', async () => {
    const other = await startTestApi();
    await other.app.database.close();
    expect((await other.fetch('/readiness')).status).toBe(503);
    await other.close();
  });
});

describe('GraphiQL', () => {
  it('serves GraphiQL from the server itself (no CDN) to a browser asking for /graphql', async () => {
    const response = await api.fetch('/graphql', { headers: { accept: 'text/html' } });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/html');
    const page = await response.text();
    expect(page).toContain('<title>Herald</title>');
    expect(page).not.toMatch(/unpkg\.com|jsdelivr|esm\.sh/);
  });
});

describe('tokens over HTTP', () => {
  const ME = JSON.stringify({ query: '{ me { id } }' });

  async function expect401(authorization: string) {
    const response = await post(ME, { authorization });
    expect(response.status).toBe(401);
    const body = await response.json();
    expect(body.errors[0].extensions.code).toBe('UNAUTHENTICATED');
    expect(body.data ?? null).toBeNull();
  }

  it('an expired token is HTTP 401 UNAUTHENTICATED', async () => {
    const expired = await api.token(
      { sub: 'alice', orgs: ['org-a'] },
      { expiresIn: Math.floor(Date.now() / 1000) - 60 },
    );
    await expect401(`Bearer ${expired}`);
    await expectStillServing();
  });

  it('a token signed by another key is HTTP 401', async () => {
    const foreign = await new SignJWT({ orgs: ['org-a'] })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('alice')
      .setExpirationTime('1h')
      .sign(new TextEncoder().encode('some-other-key-that-is-32-characters-or-more'));
    await expect401(`Bearer ${foreign}`);
  });

  it('a token with alg "none" is HTTP 401', async () => {
    const unsigned = new UnsecuredJWT({ orgs: ['org-a'] }).setSubject('alice').setExpirationTime('1h').encode();
    await expect401(`Bearer ${unsigned}`);
  });

  it('a malformed or non-Bearer authorization header is HTTP 401', async () => {
    await expect401('Bearer not-a-jwt');
    await expect401(`Basic ${Buffer.from('a:b').toString('base64')}`);
    await expect401('Bearer ');
  });

  it('the 7-character prefix is case-insensitive', async () => {
    const response = await post(ME, { authorization: `bearer ${token}` });
    expect((await response.json()).data.me.id).toBe('alice');
  });
});

describe('bad requests', () => {
  it('malformed JSON is HTTP 400 and the server keeps serving', async () => {
    const response = await post('{"query": "{ me { id } }"');
    expect(response.status).toBe(400);
    expect((await response.json()).errors[0].message).toMatch(/JSON/i);
    await expectStillServing();
  });

  it('a body over 1 MiB is HTTP 413', async () => {
    const huge = JSON.stringify({ query: '{ me { id } }', variables: { pad: 'x'.repeat(1024 * 1024) } });
    const response = await post(huge);
    expect(response.status).toBe(413);
    await expectStillServing();
  });

  it('a query deeper than 12 levels is refused before anything executes', async () => {
    const { body } = await api.graphql(deepQuery(14), {}, token);
    const depthError = body.errors?.find((error) => /depth/i.test(error.message));
    expect(depthError?.extensions?.code).toBe('GRAPHQL_VALIDATION_FAILED');
    expect(body.data).toBeUndefined();
    await expectStillServing();
  });

  it('a query within the depth limit runs', async () => {
    const { body } = await api.graphql('{ posts(orgId: "org-a") { edges { node { author { id } } } } }', {}, token);
    expect(body.errors).toBeUndefined();
  });

  it('too many aliases are refused', async () => {
    const aliases = Array.from({ length: 20 }, (_, i) => `a${i}: me { id }`).join(' ');
    const { body } = await api.graphql(`{ ${aliases} }`, {}, token);
    expect(body.errors?.[0]?.message).toMatch(/alias/i);
  });

  it('a wrong variable type is BAD_USER_INPUT', async () => {
    const { body } = await api.graphql(
      'query($n: Int) { posts(orgId: "org-a", first: $n) { edges { cursor } } }',
      { n: 'ten' },
      token,
    );
    expect(body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT');
    await expectStillServing();
  });

  it('an unknown field is a validation error with a code', async () => {
    const { body } = await api.graphql('{ me { password } }', {}, token);
    expect(body.errors?.[0]?.extensions?.code).toBe('GRAPHQL_VALIDATION_FAILED');
  });

  it('a syntax error has a code', async () => {
    const { body } = await api.graphql('{ me { id }', {}, token);
    expect(body.errors?.[0]?.extensions?.code).toBe('GRAPHQL_PARSE_FAILED');
  });

  it('an unknown post id is null for post(id) and NOT_FOUND for publishPost', async () => {
    const lookup = await api.graphql('{ post(id: "nope") { id } }', {}, token);
    expect(lookup.body).toEqual({ data: { post: null } });
    const publish = await api.graphql('mutation { publishPost(id: "nope") { id } }', {}, token);
    expect(publish.body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
  });
});

describe('GET /graphql', () => {
  const get = (query: string, headers: Record<string, string> = {}) =>
    api.fetch(`/graphql?query=${encodeURIComponent(query)}`, {
      headers: { accept: 'application/graphql-response+json', 'x-graphql-yoga-csrf': '1', ...headers },
    });

  it('runs a query', async () => {
    const response = await get('{ me { id } }', { authorization: `Bearer ${token}` });
    expect(response.status).toBe(200);
    expect((await response.json()).data.me.id).toBe('alice');
  });

  it('refuses a mutation with 405 and changes nothing', async () => {
    const response = await get('mutation { createPost(input: { orgId: "org-a", title: "via GET" }) { id } }', {
      authorization: `Bearer ${token}`,
    });
    expect(response.status).toBe(405);
    const list = await api.graphql('{ posts(orgId: "org-a", first: 100) { edges { node { title } } } }', {}, token);
    expect(JSON.stringify(list.body)).not.toContain('via GET');
  });

  it('refuses a GET without a CSRF-preventing header (403)', async () => {
    const response = await api.fetch(`/graphql?query=${encodeURIComponent('{ me { id } }')}`, {
      headers: { accept: 'application/json' },
    });
    expect(response.status).toBe(403);
  });
});

describe('errors and introspection', () => {
  it('masks unexpected errors as INTERNAL_SERVER_ERROR without internals outside development', async () => {
    const production = await startTestApi({ env: { NODE_ENV: 'production' } });
    try {
      const author = await production.token({ sub: 'p', orgs: ['o'] });
      // Break an invariant behind the API's back: a post whose author row does not exist.
      const { db } = production.app.database;
      await db.schema.alterTable('posts').dropConstraint('posts_author_id_fkey').execute();
      await db
        .insertInto('posts')
        .values({ id: 'orphan', org_id: 'o', author_id: 'ghost', title: 'x', tags: [] })
        .execute();
      const { body } = await production.graphql('{ post(id: "orphan") { author { name } } }', {}, author);
      expect(body.errors?.[0]?.extensions?.code).toBe('INTERNAL_SERVER_ERROR');
      expect(body.errors?.[0]?.message).toBe('Unexpected error.');
      expect(JSON.stringify(body)).not.toContain('ghost');
    } finally {
      await production.close();
    }
  });

  it('masks unexpected errors in single mode even when NODE_ENV is not set', async () => {
    const single = await startTestApi({ databaseUrl: inject('databaseUrl'), env: { NODE_ENV: undefined } });
    try {
      expect(single.config.mode).toBe('single');
      const author = await single.token({ sub: 'p', orgs: ['o'] });
      const { db } = single.app.database;
      await db.schema.alterTable('posts').dropConstraint('posts_author_id_fkey').execute();
      await db
        .insertInto('posts')
        .values({ id: 'orphan', org_id: 'o', author_id: 'ghost', title: 'x', tags: [] })
        .execute();
      const { body } = await single.graphql('{ post(id: "orphan") { author { name } } }', {}, author);
      expect(body.errors?.[0]?.extensions?.code).toBe('INTERNAL_SERVER_ERROR');
      expect(body.errors?.[0]?.message).toBe('Unexpected error.');
      expect(JSON.stringify(body)).not.toContain('ghost');
    } finally {
      await single.close();
    }
  });

  it('introspection can be turned off', async () => {
    const closed = await startTestApi({ env: { GRAPHQL_INTROSPECTION: 'false' } });
    try {
      const { body } = await closed.graphql('{ __schema { types { name } } }');
      expect(body.errors?.[0]?.message).toMatch(/introspection/i);
    } finally {
      await closed.close();
    }
  });

  it('introspection is on by default outside production', async () => {
    const { body } = await api.graphql('{ __schema { queryType { name } } }');
    expect(body.data.__schema.queryType.name).toBe('Query');
  });

  it('every response carries an x-request-id, and a well-formed caller id is kept', async () => {
    const response = await post(JSON.stringify({ query: '{ me { id } }' }), { 'x-request-id': 'trace-123' });
    expect(response.headers.get('x-request-id')).toBe('trace-123');
    const generated = await post(JSON.stringify({ query: '{ me { id } }' }));
    expect(generated.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });
});

/** A selection `depth` levels deep under `me` (the schema is shallow, so the inner fields don't exist). */
function deepQuery(depth: number): string {
  let selection = 'id';
  for (let level = depth - 1; level > 1; level--) selection = `f${level} { ${selection} }`;
  return `{ me { ${selection} } }`;
}
