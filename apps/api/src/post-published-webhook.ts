import { POST_PUBLISHED_EVENT } from '@herald/contracts';
import {
  type Database,
  newWebhookEventId,
  OUTBOX_NOTIFY_CHANNEL,
  POST_COLUMNS,
  type Post,
  type PublishResult,
} from '@herald/db';
import { type Kysely, sql } from 'kysely';

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

/** What {@link publishPostWithWebhook} did. */
export interface PostPublication extends PublishResult {
  /** The `post.published` outbox event's id (`evt_…`) when `published`. */
  eventId?: string;
  /**
   * True when the statement handed the event to the history relay rather than to its publisher: the
   * organisation has a handed event the relay has not moved yet, and later events must not overtake it.
   */
  handedToRelay: boolean;
}

/** The post's columns by name, not `*`: the statement is then prepared once per connection. */
const POST_COLUMN_LIST = sql.join(POST_COLUMNS.map((column) => sql.ref(column)));

/**
 * Publishes a draft and records its `post.published` webhook event in ONE statement (one round trip,
 * atomic: the outbox row exists exactly when the publication does). The draft's row is updated only
 * while it is still a draft, so of two concurrent publishes the second waits for the first's row lock,
 * finds it published, and announces nothing. The event body is the `{id, type, created, data}` envelope
 * of every webhook event, with `data` ({@link PostPublishedWebhookData}) serialised by PostgreSQL (`json_build_object`).
 * The same statement decides who appends the event to the subscription history: its publisher, right
 * after the commit (`handedToRelay` false), or the history relay when the organisation still has an
 * event handed to it (`history_handed_at`, see `handPostEventToRelay`), so the relay keeps them in order.
 *
 * With `notify` (the default) the statement also sends the outbox NOTIFY, which dispatchers LISTEN for
 * (embedded and single mode). In cluster mode the caller passes `notify: false` and wakes the
 * dispatchers through Redis after the commit instead (`PubSubService.published`): a transaction that
 * sent NOTIFY holds PostgreSQL's global notify lock across its WAL flush, so notifying publishes commit
 * one at a time.
 * @param orgIds the organisations the caller may act on; a post outside them is treated as absent
 * @returns undefined when no post with this id exists in those organisations
 */
export async function publishPostWithWebhook(
  db: Kysely<Database>,
  id: string,
  orgIds: readonly string[],
  options: { notify?: boolean } = {},
): Promise<PostPublication | undefined> {
  if (orgIds.length === 0) return undefined;
  const publishedAt = new Date();
  const eventId = newWebhookEventId();
  // `{"id":…,"type":…,"created":…,"data":` + data + `}`: the envelope is ours, `data` is the row's.
  const head = `${JSON.stringify({ id: eventId, type: POST_PUBLISHED_EVENT, created: publishedAt.toISOString() }).slice(0, -1)},"data":`;
  const { rows } = await sql<Post & { _notified: unknown; _handed: boolean }>`
    with published as (
      update posts set status = 'PUBLISHED', published_at = ${publishedAt}
      where id = ${id} and org_id = any(${[...orgIds]}::text[]) and status = 'DRAFT'
      returning ${POST_COLUMN_LIST}
    ), recorded as (
      insert into webhook_outbox (id, org_id, type, body, created_at, history_handed_at)
      select ${eventId}, p.org_id, ${POST_PUBLISHED_EVENT},
        ${head} || json_build_object(
          'id', p.id, 'orgId', p.org_id, 'title', p.title, 'tags', p.tags, 'status', 'PUBLISHED',
          'publishedAt', ${publishedAt.toISOString()}::text,
          'author', json_build_object('id', u.id, 'name', u.name)
        )::text || '}',
        ${publishedAt},
        case when exists (
          select from webhook_outbox h
          where h.org_id = p.org_id and h.historied_at is null and h.history_handed_at is not null
        ) then ${publishedAt}::timestamptz end
      from published p join users u on u.id = p.author_id
      returning history_handed_at is not null as handed
    )
    -- The same wake-up insertOutboxEvent sends: delivered at commit, so dispatchers fan out at once.
    select ${POST_COLUMN_LIST}, ${options.notify === false ? sql`null` : sql`pg_notify(${OUTBOX_NOTIFY_CHANNEL}, current_schema())`} as _notified,
      (select handed from recorded) as _handed
    from published p
  `.execute(db);
  if (rows[0]) {
    const { _notified, _handed, ...post } = rows[0];
    return { post, published: true, eventId, handedToRelay: _handed === true };
  }
  // Not a draft (already published, perhaps a moment ago by a concurrent call), or not there at all.
  const current = await db
    .selectFrom('posts')
    .selectAll()
    .where('id', '=', id)
    .where('org_id', 'in', [...orgIds])
    .executeTakeFirst();
  return current ? { post: current, published: false, handedToRelay: false } : undefined;
}
