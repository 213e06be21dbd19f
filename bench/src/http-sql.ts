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

/** `createPost`: upsert the author, insert the draft; one transaction, as Herald does. */
export async function createPostTx(pool: pg.Pool, viewer: TokenClaims, orgId: string, title: string, tags: string[]) {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query({
      name: 'bench_upsert_user',
      text: 'insert into users (id, name) values ($1, $2) on conflict (id) do update set name = excluded.name, updated_at = now() where users.name is distinct from excluded.name',
      values: [viewer.sub, viewer.name],
    });
    const { rows } = await client.query<PostRow>({
      name: 'bench_insert_post',
      text: 'insert into posts (id, org_id, author_id, title, tags) values ($1, $2, $3, $4, $5) returning *',
      values: [randomUUID(), orgId, viewer.sub, title, [...new Set(tags)]],
    });
    await client.query('commit');
    return rows[0]!;
  } catch (error) {
    await client.query('rollback').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/**
 * `publishPost`: lock the row, mark it published, read the author, write the `post.published` outbox
 * row; one transaction, as Herald does. @returns undefined for an unknown id (or another org's)
 */
export async function publishPostTx(pool: pg.Pool, viewer: TokenClaims, id: string) {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const current = await client.query<PostRow>({
      name: 'bench_lock_post',
      text: 'select * from posts where id = $1 and org_id = any($2) for update',
      values: [id, viewer.orgs],
    });
    let post = current.rows[0];
    let published = false;
    if (post && post.status !== 'PUBLISHED') {
      const updated = await client.query<PostRow>({
        name: 'bench_publish_post',
        text: "update posts set status = 'PUBLISHED', published_at = now() where id = $1 returning *",
        values: [id],
      });
      post = updated.rows[0]!;
      published = true;
      const author = await client.query<{ id: string; name: string }>({
        name: 'bench_author',
        text: 'select id, name from users where id = $1',
        values: [post.author_id],
      });
      const created = new Date();
      const eventId = `evt_${randomUUID().replaceAll('-', '')}`;
      const body = JSON.stringify({
        id: eventId,
        type: 'post.published',
        created: created.toISOString(),
        data: {
          id: post.id,
          orgId: post.org_id,
          title: post.title,
          tags: post.tags,
          status: 'PUBLISHED',
          publishedAt: (post.published_at ?? created).toISOString(),
          author: author.rows[0],
        },
      });
      await client.query({
        name: 'bench_outbox',
        text: 'insert into webhook_outbox (id, org_id, type, body, created_at) values ($1, $2, $3, $4, $5)',
        values: [eventId, post.org_id, 'post.published', body, created],
      });
    }
    await client.query('commit');
    return post ? { post, published } : undefined;
  } catch (error) {
    await client.query('rollback').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}
