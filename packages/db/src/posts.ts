import { randomUUID } from 'node:crypto';
import { CompiledQuery, type Kysely } from 'kysely';
import type { Database, Post } from './database.js';

export interface NewPostInput {
  orgId: string;
  authorId: string;
  title: string;
  tags: readonly string[];
}

export async function insertPost(db: Kysely<Database>, input: NewPostInput): Promise<Post> {
  return db
    .insertInto('posts')
    .values({
      id: randomUUID(),
      org_id: input.orgId,
      author_id: input.authorId,
      title: input.title,
      tags: [...new Set(input.tags)],
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/**
 * Records the author (as `upsertUser` does: a changed name updates the stored one) and inserts the
 * draft in ONE statement: one round trip, atomic, no transaction to open and commit.
 */
export async function insertPostWithAuthor(
  db: Kysely<Database>,
  input: NewPostInput & { authorName: string },
): Promise<Post> {
  const { rows } = await db.executeQuery<Post>(
    CompiledQuery.raw(INSERT_POST_WITH_AUTHOR, [
      input.authorId,
      input.authorName,
      randomUUID(),
      input.orgId,
      input.title,
      [...new Set(input.tags)],
    ]),
  );
  return rows[0]!;
}

export async function findPostById(db: Kysely<Database>, id: string): Promise<Post | undefined> {
  return db.selectFrom('posts').selectAll().where('id', '=', id).executeTakeFirst();
}

/**
 * Every column of `posts`, for statements that name them rather than `posts.*`: a statement without a
 * `*` is prepared once per connection (prepared-statements.ts), and keeps its shape when a later
 * migration adds a column.
 */
export const POST_COLUMNS = [
  'id',
  'org_id',
  'author_id',
  'title',
  'tags',
  'status',
  'created_at',
  'published_at',
  'seq',
] as const satisfies ReadonlyArray<keyof Post>;
/** A column added to `PostsTable` must be added to POST_COLUMNS too: this fails to compile otherwise. */
const everyPostColumn: [Exclude<keyof Post, (typeof POST_COLUMNS)[number]>] extends [never] ? true : never = true;
void everyPostColumn;

/**
 * createPost's statement, as its SQL text (built once, not by Kysely per call) returning the columns by
 * name: unlike `returning *`, it is prepared once per connection (prepared-statements.ts).
 * Parameters: $1 author id, $2 author name, $3 post id, $4 org, $5 title, $6 tags.
 */
const INSERT_POST_WITH_AUTHOR = `with author as (
    insert into users (id, name) values ($1, $2)
    on conflict (id) do update set name = excluded.name, updated_at = now()
    where users.name is distinct from excluded.name
  )
  insert into posts (id, org_id, author_id, title, tags) values ($3, $4, $1, $5, $6::text[])
  returning ${POST_COLUMNS.map((column) => `"${column}"`).join(', ')}`;

export interface PostPageQuery {
  orgId: string;
  /** Only posts older than this `seq` (the `after` cursor). */
  afterSeq?: string | null | undefined;
  /** Only posts newer than this `seq` (the `before` cursor). */
  beforeSeq?: string | null | undefined;
  limit: number;
  /** Walk from the oldest end (for `last`); the caller reverses the rows. */
  inverted?: boolean;
}

/** A post with its author's display name, read in the same query (a join on `users`). */
export type PostWithAuthor = Post & { author_name: string };

/**
 * One page of an organisation's posts, newest first (keyset pagination on `seq`), each with its
 * author's name from the same query: a page costs one round trip, authors included.
 */
export async function listPostsByOrg(db: Kysely<Database>, query: PostPageQuery): Promise<PostWithAuthor[]> {
  // The hottest read of the API (issue 15): written as its SQL text rather than built and compiled by
  // Kysely's query builder on every request (~5 % of a `posts` request's CPU). Four texts in all, each
  // prepared once per connection.
  const parameters: unknown[] = [query.orgId];
  let text = POST_PAGE_SELECT;
  if (query.afterSeq != null) {
    parameters.push(query.afterSeq);
    text += ` and "posts"."seq" < $${parameters.length}`;
  }
  if (query.beforeSeq != null) {
    parameters.push(query.beforeSeq);
    text += ` and "posts"."seq" > $${parameters.length}`;
  }
  parameters.push(query.limit);
  text += ` order by "posts"."seq" ${query.inverted ? 'asc' : 'desc'} limit $${parameters.length}`;
  const { rows } = await db.executeQuery<PostWithAuthor>(CompiledQuery.raw(text, parameters));
  return rows;
}

/** The page query up to its optional keyset bounds: every post column and the author's name. */
const POST_PAGE_SELECT = `select ${POST_COLUMNS.map((column) => `"posts"."${column}"`).join(', ')}, "users"."name" as "author_name" from "posts" inner join "users" on "users"."id" = "posts"."author_id" where "posts"."org_id" = $1`;

export interface PublishResult {
  post: Post;
  /** False when the post was already published: nothing changed and no event is due. */
  published: boolean;
}
