import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { Database, Post } from './database.js';
import { readRows } from './direct-reads.js';

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
  const rows = await readRows<Post>(db, INSERT_POST_WITH_AUTHOR, [
    input.authorId,
    input.authorName,
    randomUUID(),
    input.orgId,
    input.title,
    [...new Set(input.tags)],
  ]);
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
  /**
   * `page`: only {@link POST_PAGE_COLUMNS} (what a list usually shows; rows are {@link PostPageRow});
   * `all`: every column. @default 'all'
   */
  columns?: 'all' | 'page';
}

/** A post with its author's display name, read in the same query (a join on `users`). */
export type PostWithAuthor = Post & { author_name: string };

/**
 * The columns of a `columns: 'page'` posts page: what a list of titles with tags and author names needs,
 * and `seq` for its cursors. Every column costs: node-postgres decodes each value of each row (dates are
 * the costliest), and a page of 10 columns cost ~25 µs more CPU than one of 4.
 */
export const POST_PAGE_COLUMNS = ['id', 'title', 'tags', 'seq'] as const satisfies ReadonlyArray<keyof Post>;
/** A post of a `columns: 'page'` page: {@link POST_PAGE_COLUMNS} and the author's name. */
export type PostPageRow = Pick<Post, (typeof POST_PAGE_COLUMNS)[number]> & { author_name: string };

/**
 * One page of an organisation's posts, newest first (keyset pagination on `seq`), each with its
 * author's name from the same query: a page costs one round trip, authors included.
 */
export async function listPostsByOrg(
  db: Kysely<Database>,
  query: PostPageQuery & { columns: 'page' },
): Promise<PostPageRow[]>;
export async function listPostsByOrg(
  db: Kysely<Database>,
  query: PostPageQuery & { columns?: 'all' },
): Promise<PostWithAuthor[]>;
export async function listPostsByOrg(
  db: Kysely<Database>,
  query: PostPageQuery,
): Promise<PostWithAuthor[] | PostPageRow[]>;
export async function listPostsByOrg(
  db: Kysely<Database>,
  query: PostPageQuery,
): Promise<PostWithAuthor[] | PostPageRow[]> {
  // The hottest read of the API: written as its SQL text rather than built and compiled by
  // Kysely's query builder on every request (~5 % of a `posts` request's CPU). Sixteen texts in all,
  // made once (a constant string also keeps its hash for the prepared-statement lookup), each prepared
  // once per connection.
  const parameters: unknown[] = [query.orgId];
  let variant = 0;
  if (query.afterSeq != null) {
    parameters.push(query.afterSeq);
    variant |= AFTER;
  }
  if (query.beforeSeq != null) {
    parameters.push(query.beforeSeq);
    variant |= BEFORE;
  }
  parameters.push(query.limit);
  if (query.inverted) variant |= INVERTED;
  if (query.columns !== 'page') return readRows<PostWithAuthor>(db, ALL_TEXTS[variant]!, parameters);
  const [row] = await readRows<{ page: string | null }>(db, PAGE_TEXTS[variant]!, parameters);
  return row?.page == null ? [] : (JSON.parse(row.page) as PostPageRow[]);
}

const AFTER = 1;
const BEFORE = 2;
const INVERTED = 4;

/** The page query's text for each combination of AFTER, BEFORE and INVERTED (the index). */
function pageTexts(columns: readonly string[]): string[] {
  const select = `select ${columns.map((column) => `"posts"."${column}"`).join(', ')}, "users"."name" as "author_name" from "posts" inner join "users" on "users"."id" = "posts"."author_id" where "posts"."org_id" = $1`;
  return Array.from({ length: 8 }, (_, variant) => {
    let text = select;
    let parameter = 1;
    if (variant & AFTER) text += ` and "posts"."seq" < $${++parameter}`;
    if (variant & BEFORE) text += ` and "posts"."seq" > $${++parameter}`;
    return `${text} order by "posts"."seq" ${variant & INVERTED ? 'asc' : 'desc'} limit $${++parameter}`;
  });
}

const ALL_TEXTS = pageTexts(POST_COLUMNS);

/**
 * The `columns: 'page'` texts: the same page, sent by PostgreSQL as ONE row holding the page as JSON text
 * (`[{"id", "title", "tags", "seq", "author_name"}, …]` in page order, `seq` as text on both backends,
 * like node-postgres' int8; null when there are no posts), parsed with one `JSON.parse`. Row by row,
 * node-postgres made a Buffer slice, a string and a row object per value and parsed each `text[]` with a
 * hand-written parser: a `posts(first: 10)` request allocated 57 KB, 41 KB with this (fewer
 * young-generation GCs, the tail latency's main cause once requests no longer outlive them).
 */
const PAGE_TEXTS = pageTexts(POST_PAGE_COLUMNS).map((text, variant) => {
  const fields = POST_PAGE_COLUMNS.map((column) => `'${column}', "p"."${column}"${column === 'seq' ? '::text' : ''}`);
  return `select json_agg(json_build_object(${fields.join(', ')}, 'author_name', "p"."author_name") order by "p"."seq" ${variant & INVERTED ? 'asc' : 'desc'})::text as "page" from (${text}) as "p"`;
});

export interface PublishResult {
  post: Post;
  /** False when the post was already published: nothing changed and no event is due. */
  published: boolean;
}
