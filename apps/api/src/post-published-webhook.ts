import { newEventId, OUTBOX_NOTIFY_CHANNEL, POST_PUBLISHED_EVENT } from '@herald/contracts';
import { type Database, orgOrderLock, POST_COLUMNS, type Post, type PublishResult, readRows } from '@herald/db';
import type { Kysely } from 'kysely';

/** `data` of a `post.published` webhook: the post as the API shows it (docs/webhooks.md). */
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
  /**
   * True when the event waits for the webhook relay's fan-out (an endpoint of the organisation selects
   * `post.published`): the caller wakes the dispatchers unless the statement sent the NOTIFY. False when
   * nothing is due: the outbox row was recorded already dispatched.
   */
  fanOutDue: boolean;
  /**
   * True when the statement recorded the event `historied_at` itself ({@link PublishOptions.historyInProcess},
   * not handed to the relay): its publisher writes no batched mark, and hands it over unmarked should its
   * append not happen.
   */
  historied: boolean;
}

/** The post's columns by name, not `*`: the statement is then prepared once per connection. */
const POST_COLUMN_LIST = POST_COLUMNS.map((column) => `"${column}"`).join(', ');

/**
 * The publish statement's text, with and without the NOTIFY: built once, not by Kysely's builder and
 * compiler on every call (the mutation's hot path). Parameters: $1 published at, $2 post id,
 * $3 organisations, $4 event id, $5 event type, $6 the envelope's head, $7 published at as ISO text,
 * $8 the publishing operation's `traceparent` (null when tracing is off).
 * With `historied`, an event its publisher will append itself (not handed to the relay) is recorded
 * `historied_at` at once (see {@link PublishOptions.historyInProcess}).
 */
function publishStatement(notify: boolean, historied: boolean): string {
  return `with published as (
      update posts set status = 'PUBLISHED', published_at = $1
      where id = $2 and org_id = any($3::text[]) and status = 'DRAFT'
      returning ${POST_COLUMN_LIST}
    ), recorded as (
      insert into webhook_outbox (id, org_id, type, body, created_at, traceparent, history_handed_at, ${
        historied ? 'historied_at, ' : ''
      }dispatched_at)
      select $4, p.org_id, $5::text,
        $6 || json_build_object(
          'id', p.id, 'orgId', p.org_id, 'title', p.title, 'tags', p.tags, 'status', 'PUBLISHED',
          'publishedAt', $7::text,
          'author', json_build_object('id', u.id, 'name', u.name)
        )::text || '}',
        $1,
        $8::text,
        case when queue.handed then $1::timestamptz end,${historied ? '\n        case when not queue.handed then $1::timestamptz end,' : ''}
        case when not exists (
          select from webhook_endpoints e
          where e.org_id = p.org_id and e.deleted_at is null and $5::text = any(e.event_types)
        ) then now() end
      from published p join users u on u.id = p.author_id
      -- Numbered in commit order when the organisation has a FIFO endpoint: its lock, then seq.
      cross join lateral ${orgOrderLock('p.org_id')} ordered
      cross join lateral (
        select exists (
          select from webhook_outbox h
          where h.org_id = p.org_id and h.historied_at is null and h.history_handed_at is not null
        ) as handed
      ) queue
      returning history_handed_at is not null as handed, dispatched_at is null as due
    )
    select ${POST_COLUMN_LIST}, (select handed from recorded) as _handed, (select due from recorded) as _due${
      // The same wake-up insertOutboxEvent sends, delivered at commit, when there is something to fan out.
      notify
        ? `, (select pg_notify('${OUTBOX_NOTIFY_CHANNEL}', current_schema()) from recorded where due) as _notified`
        : ''
    }
    from published p`;
}
/** The statement's four texts, by `notify` then `historied`. */
const PUBLISH_STATEMENTS = {
  notify: { marked: publishStatement(true, true), unmarked: publishStatement(true, false) },
  quiet: { marked: publishStatement(false, true), unmarked: publishStatement(false, false) },
} as const;

export interface PublishOptions {
  /** Send the outbox NOTIFY in the statement when a fan-out is due (see below). @default true */
  notify?: boolean;
  /**
   * The caller appends the event right after the commit to a history that lives in this process only
   * (in-memory pub/sub: embedded and single mode), unless the statement handed it to the relay. The
   * row is then recorded `historied_at` by the statement itself instead of by a batched mark a moment
   * later: that history does not outlive the process, so an event its publisher died before appending
   * has no history left to enter, and on PostgreSQL every batched mark was one more row version per
   * event. @default false
   */
  historyInProcess?: boolean;
  /**
   * The W3C `traceparent` of the publishing operation, stored with the event so its webhook attempts
   * and subscription fan-out join that trace (docs/operations.md, "Tracing"). @default null
   */
  traceparent?: string | null;
}

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
 * When no endpoint of the organisation selects `post.published` (deleted ones aside; a disabled one
 * still gets its SKIPPED delivery), the fan-out would create no delivery: the row is recorded already
 * dispatched (`dispatched_at`, so it never enters the pending-fan-out queue): the webhook relay has
 * nothing to do for it and nobody is woken
 * (on the embedded PGlite that fan-out statement cost as much CPU as the publish itself). The
 * endpoints are read in the publish's own snapshot: an endpoint created after the publication committed
 * does not get the event (before, one created in the milliseconds before the relay's pass did).
 *
 * With `notify` (the default) the statement also sends the outbox NOTIFY when a fan-out is due, which
 * dispatchers on other connections LISTEN for. A caller that wakes the dispatchers itself after the
 * commit (cluster mode through Redis; embedded and single mode in process, `PubSubService.published`)
 * passes `notify: false`: a transaction that sent NOTIFY holds PostgreSQL's global notify lock across
 * its WAL flush, so notifying publishes commit one at a time.
 * @param orgIds the organisations the caller may act on; a post outside them is treated as absent
 * @returns undefined when no post with this id exists in those organisations
 */
export async function publishPostWithWebhook(
  db: Kysely<Database>,
  id: string,
  orgIds: readonly string[],
  options: PublishOptions = {},
): Promise<PostPublication | undefined> {
  if (orgIds.length === 0) return undefined;
  const publishedAt = new Date();
  const eventId = newEventId();
  // `{"id":…,"type":…,"created":…,"data":` + data + `}`: the envelope is ours, `data` is the row's.
  const head = `${JSON.stringify({ id: eventId, type: POST_PUBLISHED_EVENT, created: publishedAt.toISOString() }).slice(0, -1)},"data":`;
  // One statement on its own: straight to the pool on PostgreSQL (readRows), Kysely's path otherwise.
  const rows = await readRows<Post & { _handed: boolean; _due: boolean; _notified?: unknown }>(
    db,
    PUBLISH_STATEMENTS[options.notify === false ? 'quiet' : 'notify'][
      options.historyInProcess === true ? 'marked' : 'unmarked'
    ],
    [
      publishedAt,
      id,
      [...orgIds],
      eventId,
      POST_PUBLISHED_EVENT,
      head,
      publishedAt.toISOString(),
      options.traceparent ?? null,
    ],
  );
  if (rows[0]) {
    const { _notified, _handed, _due, ...post } = rows[0];
    const handedToRelay = _handed === true;
    return {
      post,
      published: true,
      eventId,
      handedToRelay,
      fanOutDue: _due === true,
      historied: options.historyInProcess === true && !handedToRelay,
    };
  }
  // Not a draft (already published, perhaps a moment ago by a concurrent call), or not there at all.
  const current = await db
    .selectFrom('posts')
    .selectAll()
    .where('id', '=', id)
    .where('org_id', 'in', [...orgIds])
    .executeTakeFirst();
  return current
    ? { post: current, published: false, handedToRelay: false, fanOutDue: false, historied: false }
    : undefined;
}
