import { POST_PUBLISHED_EVENT } from '@herald/contracts';
import {
  type Database,
  insertOutboxEvent,
  newWebhookEventId,
  OUTBOX_NOTIFY_CHANNEL,
  POST_COLUMNS,
  type Post,
  type PublishResult,
} from '@herald/db';
import type { WebhookEvent } from '@herald/webhooks';
import { type Kysely, sql, type Transaction } from 'kysely';

/** `data` of a `post.published` webhook: the post as the API shows it (SPEC §5, §7). */
export interface PostPublishedWebhookData {
  id: string;
  orgId: string;
  title: string;
  tags: string[];
  status: 'PUBLISHED';
  publishedAt: string;
  author: { id: string; name: string };
}

/**
 * Writes the `post.published` webhook event to the outbox inside the transaction that published the
 * post, so the event exists exactly when the publication committed. The dispatcher delivers it.
 */
export async function recordPostPublishedWebhook(trx: Transaction<Database>, post: Post): Promise<void> {
  const author = await trx
    .selectFrom('users')
    .select(['id', 'name'])
    .where('id', '=', post.author_id)
    .executeTakeFirstOrThrow();
  const created = new Date();
  const event: WebhookEvent<PostPublishedWebhookData> = {
    id: newWebhookEventId(),
    type: POST_PUBLISHED_EVENT,
    created: created.toISOString(),
    data: {
      id: post.id,
      orgId: post.org_id,
      title: post.title,
      tags: post.tags,
      status: 'PUBLISHED',
      publishedAt: (post.published_at ?? created).toISOString(),
      author: { id: author.id, name: author.name },
    },
  };
  await insertOutboxEvent(trx, {
    id: event.id,
    orgId: post.org_id,
    type: event.type,
    body: JSON.stringify(event),
    createdAt: created,
  });
}

/** The post's columns by name, not `*`: the statement is then prepared once per connection. */
const POST_COLUMN_LIST = sql.join(POST_COLUMNS.map((column) => sql.ref(column)));

/**
 * Publishes a draft and records its `post.published` webhook event in ONE statement (one round trip,
 * atomic: the outbox row exists exactly when the publication does). The draft's row is updated only
 * while it is still a draft, so of two concurrent publishes the second waits for the first's row lock,
 * finds it published, and announces nothing (the same guarantee as `publishPostInTransaction`). The
 * event body is the same `{id, type, created, data}` object as `recordPostPublishedWebhook`'s, with
 * `data` serialised by PostgreSQL (`json_build_object`).
 * @param orgIds the organisations the caller may act on; a post outside them is treated as absent
 * @returns undefined when no post with this id exists in those organisations
 */
export async function publishPostWithWebhook(
  db: Kysely<Database>,
  id: string,
  orgIds: readonly string[],
): Promise<PublishResult | undefined> {
  if (orgIds.length === 0) return undefined;
  const publishedAt = new Date();
  const eventId = newWebhookEventId();
  // `{"id":…,"type":…,"created":…,"data":` + data + `}`: the envelope is ours, `data` is the row's.
  const head = `${JSON.stringify({ id: eventId, type: POST_PUBLISHED_EVENT, created: publishedAt.toISOString() }).slice(0, -1)},"data":`;
  const { rows } = await sql<Post & { _notified: unknown }>`
    with published as (
      update posts set status = 'PUBLISHED', published_at = ${publishedAt}
      where id = ${id} and org_id = any(${[...orgIds]}::text[]) and status = 'DRAFT'
      returning ${POST_COLUMN_LIST}
    ), recorded as (
      insert into webhook_outbox (id, org_id, type, body, created_at)
      select ${eventId}, p.org_id, ${POST_PUBLISHED_EVENT},
        ${head} || json_build_object(
          'id', p.id, 'orgId', p.org_id, 'title', p.title, 'tags', p.tags, 'status', 'PUBLISHED',
          'publishedAt', ${publishedAt.toISOString()}::text,
          'author', json_build_object('id', u.id, 'name', u.name)
        )::text || '}',
        ${publishedAt}
      from published p join users u on u.id = p.author_id
    )
    -- The same wake-up insertOutboxEvent sends: delivered at commit, so dispatchers fan out at once.
    select ${POST_COLUMN_LIST}, pg_notify(${OUTBOX_NOTIFY_CHANNEL}, current_schema()) as _notified from published p
  `.execute(db);
  if (rows[0]) {
    const { _notified, ...post } = rows[0];
    return { post, published: true };
  }
  // Not a draft (already published, perhaps a moment ago by a concurrent call), or not there at all.
  const current = await db
    .selectFrom('posts')
    .selectAll()
    .where('id', '=', id)
    .where('org_id', 'in', [...orgIds])
    .executeTakeFirst();
  return current ? { post: current, published: false } : undefined;
}
