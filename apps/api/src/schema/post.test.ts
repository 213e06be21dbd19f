import { createTokenVerifier } from '@herald/auth';
import type { KyselyPlugin } from 'kysely';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createApiMetrics } from '../metrics.js';
import { createServer } from '../server.js';
import { startTestApi, TEST_JWT_SECRET, type TestApi } from '../testing/test-api.js';

const CREATE = /* GraphQL */ `
  mutation Create($input: CreatePostInput!) {
    createPost(input: $input) { id orgId title tags status publishedAt author { id name } }
  }
`;
const PUBLISH = /* GraphQL */ `
  mutation Publish($id: ID!) { publishPost(id: $id) { id status publishedAt } }
`;
const POSTS = /* GraphQL */ `
  query Posts($orgId: ID!, $first: Int, $after: String) {
    posts(orgId: $orgId, first: $first, after: $after) {
      edges { cursor node { id title author { name } } }
      pageInfo { hasNextPage endCursor }
    }
  }
`;
const POST = /* GraphQL */ `
  query Post($id: ID!) { post(id: $id) { id title orgId } }
`;

let api: TestApi;
let alice: string; // member of org-a
let bob: string; // member of org-b
let carol: string; // member of org-a and org-b

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl') });
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-a'] });
  bob = await api.token({ sub: 'bob', name: 'Bob', orgs: ['org-b'] });
  carol = await api.token({ sub: 'carol', name: 'Carol', orgs: ['org-a', 'org-b'] });
});

afterAll(() => api.close());

async function createPost(token: string, orgId: string, title: string, tags: string[] = []) {
  const { body } = await api.graphql(CREATE, { input: { orgId, title, tags } }, token);
  expect(body.errors).toBeUndefined();
  return body.data.createPost as { id: string; orgId: string; title: string };
}

describe('me', () => {
  it('is the token holder', async () => {
    const { body } = await api.graphql('{ me { id name orgs } }', {}, alice);
    expect(body).toEqual({ data: { me: { id: 'alice', name: 'Alice', orgs: ['org-a'] } } });
  });

  it('is null without a token', async () => {
    const { status, body } = await api.graphql('{ me { id } }');
    expect(status).toBe(200);
    expect(body).toEqual({ data: { me: null } });
  });
});

describe('createPost and publishPost', () => {
  it('creates a draft authored by the caller, then publishes it', async () => {
    const { body } = await api.graphql(
      CREATE,
      { input: { orgId: 'org-a', title: ' Hello ', tags: ['a', 'b'] } },
      alice,
    );
    expect(body.data.createPost).toMatchObject({
      orgId: 'org-a',
      title: 'Hello',
      tags: ['a', 'b'],
      status: 'DRAFT',
      publishedAt: null,
      author: { id: 'alice', name: 'Alice' },
    });
    const published = await api.graphql(PUBLISH, { id: body.data.createPost.id }, alice);
    expect(published.body.data.publishPost.status).toBe('PUBLISHED');
    expect(Date.parse(published.body.data.publishPost.publishedAt)).toBeGreaterThan(Date.now() - 60_000);
  });

  it('publishing twice keeps the first publication time', async () => {
    const post = await createPost(alice, 'org-a', 'twice');
    const first = await api.graphql(PUBLISH, { id: post.id }, alice);
    const second = await api.graphql(PUBLISH, { id: post.id }, alice);
    expect(second.body.data.publishPost.publishedAt).toBe(first.body.data.publishPost.publishedAt);
  });

  it.each([
    [{ title: '   ' }, 'title'],
    [{ title: 'x'.repeat(301) }, 'title'],
    [{ title: 'ok', tags: [''] }, 'tags'],
    [{ title: 'ok', tags: Array.from({ length: 21 }, (_, i) => `t${i}`) }, 'tags'],
  ])('refuses %j with BAD_USER_INPUT and stores nothing', async (input, field) => {
    const before = await api.graphql(POSTS, { orgId: 'org-a', first: 100 }, alice);
    const { body } = await api.graphql(CREATE, { input: { orgId: 'org-a', ...input } }, alice);
    expect(body.errors?.[0]?.extensions).toMatchObject({ code: 'BAD_USER_INPUT', field });
    const after = await api.graphql(POSTS, { orgId: 'org-a', first: 100 }, alice);
    expect(after.body.data.posts.edges).toHaveLength(before.body.data.posts.edges.length);
  });

  it('creates a draft, its author row and answers its author with one statement', async () => {
    let queries = 0;
    // Counted as results come back: a query sent as SQL text (the page) skips transformQuery.
    const counter: KyselyPlugin = {
      transformQuery: (args) => args.node,
      transformResult: async (args) => {
        queries++;
        return args.result;
      },
    };
    const dave = await api.token({ sub: 'dave', name: 'Dave', orgs: ['org-d'] });
    const { body } = await startCountingApi(counter).graphql(
      CREATE,
      { input: { orgId: 'org-d', title: 'counted', tags: [] } },
      dave,
    );
    expect(body.data.createPost).toMatchObject({ title: 'counted', author: { id: 'dave', name: 'Dave' } });
    expect(queries).toBe(1);
  });

  it('publishes with one statement that also writes the post.published outbox row', async () => {
    const post = await createPost(alice, 'org-a', 'one round trip', ['x', 'y']);
    let queries = 0;
    // Counted as results come back: a query sent as SQL text (the page) skips transformQuery.
    const counter: KyselyPlugin = {
      transformQuery: (args) => args.node,
      transformResult: async (args) => {
        queries++;
        return args.result;
      },
    };
    const { body } = await startCountingApi(counter).graphql(PUBLISH, { id: post.id }, alice);
    expect(body.data.publishPost.status).toBe('PUBLISHED');
    expect(queries).toBe(1);
    const rows = await outboxRowsOf(post.id);
    expect(rows).toHaveLength(1);
    const event = JSON.parse(rows[0]!.body);
    expect(event).toEqual({
      id: rows[0]!.id,
      type: 'post.published',
      created: expect.any(String),
      data: {
        id: post.id,
        orgId: 'org-a',
        title: 'one round trip',
        tags: ['x', 'y'],
        status: 'PUBLISHED',
        publishedAt: body.data.publishPost.publishedAt,
        author: { id: 'alice', name: 'Alice' },
      },
    });
  });

  it('announces a post once when it is published by several requests at the same time', async () => {
    const post = await createPost(alice, 'org-a', 'raced');
    const answers = await Promise.all(Array.from({ length: 6 }, () => api.graphql(PUBLISH, { id: post.id }, alice)));
    for (const answer of answers) expect(answer.body.data.publishPost.status).toBe('PUBLISHED');
    expect(new Set(answers.map((answer) => answer.body.data.publishPost.publishedAt)).size).toBe(1);
    expect(await outboxRowsOf(post.id)).toHaveLength(1);
  });

  it('publishPost of an unknown id is NOT_FOUND', async () => {
    const { body } = await api.graphql(PUBLISH, { id: 'does-not-exist' }, alice);
    expect(body.data).toBeNull();
    expect(body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
  });
});

describe('posts connection', () => {
  it('pages newest first with cursors until hasNextPage is false', async () => {
    const titles = ['p1', 'p2', 'p3', 'p4', 'p5'];
    for (const title of titles) await createPost(bob, 'org-b', title);
    const seen: string[] = [];
    let after: string | null = null;
    for (let page = 0; page < 5; page++) {
      const { body } = await api.graphql(POSTS, { orgId: 'org-b', first: 2, after }, bob);
      seen.push(...body.data.posts.edges.map((edge: { node: { title: string } }) => edge.node.title));
      if (!body.data.posts.pageInfo.hasNextPage) break;
      after = body.data.posts.pageInfo.endCursor;
    }
    expect(seen).toEqual([...titles].reverse());
  });

  it('refuses first outside 0..100 and a forged cursor with BAD_USER_INPUT', async () => {
    for (const variables of [{ first: -1 }, { first: 101 }, { after: 'not-a-cursor' }, { after: 'cG9zdDp4' }]) {
      const { body } = await api.graphql(POSTS, { orgId: 'org-b', ...variables }, bob);
      expect(body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT');
    }
  });

  it('reads a page and its authors with one query in all', async () => {
    for (const token of [alice, carol, alice, carol]) await createPost(token, 'org-a', 'authored');
    let queries = 0;
    // Counted as results come back: a query sent as SQL text (the page) skips transformQuery.
    const counter: KyselyPlugin = {
      transformQuery: (args) => args.node,
      transformResult: async (args) => {
        queries++;
        return args.result;
      },
    };
    const { body } = await startCountingApi(counter).graphql(POSTS, { orgId: 'org-a', first: 50 }, carol);
    const names = body.data.posts.edges.map((edge: { node: { author: { name: string } } }) => edge.node.author.name);
    expect(names.length).toBeGreaterThanOrEqual(4);
    expect(new Set(names)).toEqual(new Set(['Alice', 'Carol']));
    expect(queries).toBe(1);
  });
});

describe('posts page columns', () => {
  /** The column names of each page read through a counting server, in order. */
  async function columnsRead(query: string) {
    const reads: string[][] = [];
    const recorder: KyselyPlugin = {
      transformQuery: (args) => args.node,
      transformResult: async (args) => {
        let row = args.result.rows[0];
        // A `page` read answers one row holding the page as JSON text (listPostsByOrg).
        if (row && typeof row === 'object' && 'page' in row) row = JSON.parse(String(row.page))?.[0];
        if (row && typeof row === 'object' && 'seq' in row) reads.push(Object.keys(row).sort());
        return args.result;
      },
    };
    const { body } = await startCountingApi(recorder).graphql(query, { orgId: 'org-a' }, alice);
    return { body, reads };
  }
  const PAGE = ['author_name', 'id', 'seq', 'tags', 'title'];
  const ALL = [
    'author_id',
    'author_name',
    'created_at',
    'id',
    'org_id',
    'published_at',
    'seq',
    'status',
    'tags',
    'title',
  ];

  it('reads only the page columns when no field asked of the posts needs another', async () => {
    await createPost(alice, 'org-a', 'columns', ['x']);
    const { body, reads } = await columnsRead(`query Page($orgId: ID!) {
      posts(orgId: $orgId, first: 5) {
        __typename pageInfo { hasNextPage } edges { cursor node { __typename id title tags author { __typename name } } }
      }
    }`);
    expect(body.errors).toBeUndefined();
    expect(body.data.posts.edges[0].node).toMatchObject({ title: 'columns', tags: ['x'], author: { name: 'Alice' } });
    expect(reads).toEqual([PAGE]);
  });

  it.each([
    ['a field outside the page', '{ edges { node { id status } } }'],
    ['orgId', '{ edges { node { id orgId } } }'],
    ["the author's id", '{ edges { node { author { id name } } } }'],
    ["the author's id in a fragment", '{ edges { node { author { ...Who } } } } fragment Who on Author { id }'],
    ['a named fragment', '{ edges { node { ...Dates } } } fragment Dates on Post { createdAt publishedAt }'],
    ['an inline fragment', '{ ... on PostConnection { edges { node { ... on Post { createdAt } } } } }'],
    ['a second, aliased edges', '{ edges { node { id } } more: edges { node { status } } }'],
    ['a field skipped by a directive', '{ edges { node { id createdAt @skip(if: true) } } }'],
  ])('reads every column for %s, and answers it', async (_name, selection) => {
    const brace = selection.indexOf(' fragment ');
    const [connection, fragments] = brace < 0 ? [selection, ''] : [selection.slice(0, brace), selection.slice(brace)];
    const { body, reads } = await columnsRead(
      `query Page($orgId: ID!) { posts(orgId: $orgId, first: 5) ${connection} }${fragments}`,
    );
    expect(body.errors).toBeUndefined();
    expect(reads).toEqual([ALL]);
    const nodes = body.data.posts.edges.map((edge: { node: Record<string, unknown> }) => edge.node);
    for (const node of nodes) {
      if ('status' in node) expect(node.status).toBe('DRAFT');
      if ('orgId' in node) expect(node.orgId).toBe('org-a');
      if (node.author && 'id' in (node.author as object))
        expect((node.author as { id: unknown }).id).toEqual(expect.any(String));
      if ('createdAt' in node) expect(node.createdAt).toMatch(/^\d{4}-\d\d-\d\dT/);
    }
  });
});

/** The webhook outbox rows that announce `postId`. */
async function outboxRowsOf(postId: string) {
  const rows = await api.app.database.db.selectFrom('webhook_outbox').select(['id', 'body']).execute();
  return rows.filter((row) => JSON.parse(row.body).data?.id === postId);
}

/** A second server on the same database whose queries pass through `plugin`. */
function startCountingApi(plugin: KyselyPlugin): Pick<TestApi, 'graphql'> {
  const server = createServer({
    config: api.config,
    database: { ...api.app.database, db: api.app.database.db.withPlugin(plugin) },
    verifier: createTokenVerifier({ key: { kind: 'secret', secret: TEST_JWT_SECRET } }),
    logger: pino({ level: 'silent' }),
    pubsub: api.app.pubsub,
    metrics: createApiMetrics(),
    quotas: api.app.quotas,
  });
  return {
    async graphql(query, variables, token) {
      const response = await server.yoga.fetch('http://herald.test/graphql', {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: JSON.stringify({ query, variables }),
      });
      return { status: response.status, headers: response.headers, body: await response.json() };
    },
  };
}

describe('tenancy: org-a members never reach org-b', () => {
  let bPost: { id: string };

  beforeAll(async () => {
    bPost = await createPost(bob, 'org-b', 'secret plans');
  });

  it('posts(orgId) of a foreign org is FORBIDDEN with no data', async () => {
    const { body } = await api.graphql(POSTS, { orgId: 'org-b' }, alice);
    expect(body.data).toBeNull();
    expect(body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN');
    expect(JSON.stringify(body)).not.toContain('secret plans');
  });

  it('post(id) of a foreign post is null, exactly like an unknown id', async () => {
    const foreign = await api.graphql(POST, { id: bPost.id }, alice);
    const unknown = await api.graphql(POST, { id: 'no-such-post' }, alice);
    expect(foreign.body).toEqual({ data: { post: null } });
    expect(foreign.body).toEqual(unknown.body);
  });

  it('createPost in a foreign org is FORBIDDEN and stores nothing', async () => {
    const { body } = await api.graphql(CREATE, { input: { orgId: 'org-b', title: 'intrusion' } }, alice);
    expect(body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN');
    const list = await api.graphql(POSTS, { orgId: 'org-b', first: 100 }, bob);
    expect(JSON.stringify(list.body)).not.toContain('intrusion');
  });

  it('publishPost of a foreign post is NOT_FOUND, exactly like an unknown id, and leaves it a draft', async () => {
    const foreign = await api.graphql(PUBLISH, { id: bPost.id }, alice);
    const unknown = await api.graphql(PUBLISH, { id: 'no-such-post' }, alice);
    expect(foreign.body.errors?.[0]?.extensions?.code).toBe('NOT_FOUND');
    expect(foreign.body.errors?.[0]?.message).toBe(unknown.body.errors?.[0]?.message);
    const check = await api.graphql('query($id: ID!) { post(id: $id) { status } }', { id: bPost.id }, bob);
    expect(check.body.data.post.status).toBe('DRAFT');
  });

  it('a member of both orgs sees both', async () => {
    const { body } = await api.graphql(POST, { id: bPost.id }, carol);
    expect(body.data.post.title).toBe('secret plans');
  });

  it('every operation without a token is UNAUTHENTICATED', async () => {
    for (const [query, variables] of [
      [POSTS, { orgId: 'org-a' }],
      [POST, { id: bPost.id }],
      [CREATE, { input: { orgId: 'org-a', title: 'anon' } }],
      [PUBLISH, { id: bPost.id }],
    ] as const) {
      const { status, body } = await api.graphql(query, variables);
      expect(status).toBe(200);
      expect(body.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED');
      expect(JSON.stringify(body.data ?? null)).not.toContain('secret plans');
    }
  });
});
