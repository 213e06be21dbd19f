/**
 * The SQL of the HTTP section's baselines (`http-raw-server.ts`, `http-yoga-server.ts`): what Herald's
 * resolvers do, written by hand once, so the raw loop and stock Yoga run exactly the same statements.
 * Statements are named, so `pg` prepares each once per connection (what a hand-tuned loop would do).
 */
import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import type pg from 'pg';

/** The four operations of the section; the request's `operationName` says which one a body is. */
export const HTTP_OPERATIONS = {
  posts:
    'query Posts($orgId: ID!) { posts(orgId: $orgId, first: 10) { edges { node { id title tags author { name } } } } }',
  me: 'query Me { me { id } }',
  createPost: 'mutation CreatePost($input: CreatePostInput!) { createPost(input: $input) { id title tags } }',
  publishPost: 'mutation PublishPost($id: ID!) { publishPost(id: $id) { id status } }',
} as const;
export type HttpOperation = keyof typeof HTTP_OPERATIONS;
export const OPERATION_NAMES: Record<string, HttpOperation> = {
  Posts: 'posts',
  Me: 'me',
  CreatePost: 'createPost',
  PublishPost: 'publishPost',
};

export interface TokenClaims {
  sub: string;
  name: string;
  orgs: string[];
  exp: number;
}

/**
 * HS256 verification with node:crypto alone: header must say HS256, signature compared in constant
 * time, `exp` required and in the future (5 s leeway, as Herald's verifier).
 * @returns undefined for every token that must not authenticate
 */
export function verifyHs256(token: string, secret: Buffer): TokenClaims | undefined {
  const first = token.indexOf('.');
  const second = token.indexOf('.', first + 1);
  if (first < 0 || second < 0) return undefined;
  try {
    const header = JSON.parse(Buffer.from(token.slice(0, first), 'base64url').toString('utf8')) as { alg?: string };
    if (header.alg !== 'HS256') return undefined;
    const expected = createHmac('sha256', secret).update(token.slice(0, second)).digest();
    const given = Buffer.from(token.slice(second + 1), 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
    const claims = JSON.parse(Buffer.from(token.slice(first + 1, second), 'base64url').toString('utf8'));
    if (typeof claims.sub !== 'string' || typeof claims.exp !== 'number') return undefined;
    if (claims.exp + 5 < Date.now() / 1000) return undefined;
    return { sub: claims.sub, name: claims.name ?? claims.sub, orgs: claims.orgs ?? [], exp: claims.exp };
  } catch {
    return undefined;
  }
}

export interface PostRow {
  id: string;
  org_id: string;
  author_id: string;
  title: string;
  tags: string[];
  status: string;
  published_at: Date | null;
}

/** `posts(orgId, first)` with authors: one join. */
export async function selectPostsPage(pool: pg.Pool, orgId: string, first: number) {
  const { rows } = await pool.query<{ id: string; title: string; tags: string[]; name: string }>({
    name: 'bench_posts_page',
    text: 'select p.id, p.title, p.tags, u.name from posts p join users u on u.id = p.author_id where p.org_id = $1 order by p.seq desc limit $2',
    values: [orgId, first],
  });
  return rows;
}

/** `createPost`: the author row and the draft in one statement, as Herald does (`insertPostWithAuthor`). */
export async function createPostTx(pool: pg.Pool, viewer: TokenClaims, orgId: string, title: string, tags: string[]) {
  const { rows } = await pool.query<PostRow>({
    name: 'bench_create_post',
    text: `with author as (
        insert into users (id, name) values ($1, $2)
        on conflict (id) do update set name = excluded.name, updated_at = now()
        where users.name is distinct from excluded.name
      )
      insert into posts (id, org_id, author_id, title, tags) values ($3, $4, $1, $5, $6::text[]) returning *`,
    values: [viewer.sub, viewer.name, randomUUID(), orgId, title, [...new Set(tags)]],
  });
  return rows[0]!;
}

/**
 * `publishPost`: mark the draft published and write its `post.published` outbox row (author read by a
 * join) in one statement, as Herald does (`publishPostWithWebhook`); a post that is not a draft is read
 * back. The baselines share Herald's schema, so their rows are written as already taken by the history
 * relay and the webhook engine (`historied_at`, `dispatched_at`): otherwise Herald's relay and in-process
 * engine would move thousands of baseline events during Herald's own trials and every Herald publish would
 * wait behind them. @returns undefined for an unknown id (or another org's)
 */
export async function publishPostTx(pool: pg.Pool, viewer: TokenClaims, id: string) {
  const publishedAt = new Date();
  const eventId = `evt_${randomUUID().replaceAll('-', '')}`;
  const head = `${JSON.stringify({ id: eventId, type: 'post.published', created: publishedAt.toISOString() }).slice(0, -1)},"data":`;
  const { rows } = await pool.query<PostRow>({
    name: 'bench_publish_post',
    text: `with published as (
        update posts set status = 'PUBLISHED', published_at = $1
        where id = $2 and org_id = any($3::text[]) and status = 'DRAFT'
        returning *
      ), recorded as (
        insert into webhook_outbox (id, org_id, type, body, created_at, historied_at, dispatched_at)
        select $4, p.org_id, 'post.published',
          $5 || json_build_object(
            'id', p.id, 'orgId', p.org_id, 'title', p.title, 'tags', p.tags, 'status', 'PUBLISHED',
            'publishedAt', $6::text, 'author', json_build_object('id', u.id, 'name', u.name)
          )::text || '}',
          $1, $1, $1
        from published p join users u on u.id = p.author_id
      )
      select * from published`,
    values: [publishedAt, id, viewer.orgs, eventId, head, publishedAt.toISOString()],
  });
  if (rows[0]) return { post: rows[0], published: true };
  const current = await pool.query<PostRow>({
    name: 'bench_read_post',
    text: 'select * from posts where id = $1 and org_id = any($2::text[])',
    values: [id, viewer.orgs],
  });
  return current.rows[0] ? { post: current.rows[0], published: false } : undefined;
}
