import { POST_PUBLISHED_EVENT } from '@herald/contracts';
import { type Kysely, sql, type Transaction } from 'kysely';
import type { Database, Post } from './database.js';

/**
 * The subscription side of the outbox: `post.published` events not yet in the
 * subscription history (`webhook_outbox.historied_at`, its own marker; the webhook relay's columns are
 * untouched). Queried with SQL rather than through the Database type, which the webhook engine owns.
 */

export interface PendingPostEvent {
  /** The outbox event id (`evt_…`). */
  eventId: string;
  post: Post;
  /** The publishing operation's W3C `traceparent`; null when tracing was off. */
  traceparent: string | null;
}

/**
 * Runs `work` while holding this schema's history-relay lock (waiting for it), so one relay at a time
 * across pods moves events into the history, in order. The transaction commits without waiting for its
 * WAL flush (the marks are idempotent to lose).
 */
export async function withHistoryRelayLock<T>(
  db: Kysely<Database>,
  work: (trx: Transaction<Database>) => Promise<T>,
): Promise<T> {
  return db.transaction().execute(async (trx) => {
    // Without a WAL flush at commit: a mark lost in a crash only makes the next pass append the event
    // again, and the history drops an event id it already holds.
    await sql`select pg_advisory_xact_lock(hashtext(current_schema() || ':herald-subscription-history-relay')),
      set_config('synchronous_commit', 'off', true)`.execute(trx);
    return work(trx);
  });
}

/**
 * The oldest `post.published` events the history relay should move, in outbox order, with their posts:
 * those handed to it (`history_handed_at`: their publisher could not append them, see
 * {@link handPostEventToRelay}), and those pending for longer than `orphanAfterMs` (their publisher
 * died between its commit and its append or its mark). A younger event is left to its publisher, which
 * is appending it right now.
 */
export async function listPendingPostEvents(
  db: Kysely<Database>,
  limit: number,
  orphanAfterMs = 0,
): Promise<PendingPostEvent[]> {
  const { rows } = await sql<Post & { event_id: string; event_traceparent: string | null }>`
    select o.id as event_id, o.traceparent as event_traceparent, p.id, p.org_id, p.author_id, p.title, p.tags, p.status, p.created_at, p.published_at, p.seq
    from webhook_outbox o
    join posts p on p.id = (o.body::jsonb -> 'data' ->> 'id') and p.org_id = o.org_id
    where o.historied_at is null and o.type = ${POST_PUBLISHED_EVENT}
      and (o.history_handed_at is not null or o.created_at < now() - make_interval(secs => ${orphanAfterMs / 1000}::float8))
    order by o.seq
    limit ${limit}
  `.execute(db);
  return rows.map(({ event_id, event_traceparent, ...post }) => ({
    eventId: event_id,
    post,
    traceparent: event_traceparent,
  }));
}

/** Marks events as in the history (inside the relay's transaction). */
export async function markPostEventsHistoried(db: Kysely<Database>, eventIds: readonly string[]): Promise<void> {
  if (eventIds.length === 0) return;
  await sql`update webhook_outbox set historied_at = now() where id in (${sql.join(eventIds)})`.execute(db);
}

/**
 * Marks events their publishers appended to the history themselves, as one statement committed without
 * waiting for its WAL flush (a lost mark only lets the relay append the event again after its grace,
 * and the history drops an event id it already holds).
 */
export async function markPostEventsHistoriedBatch(db: Kysely<Database>, eventIds: readonly string[]): Promise<void> {
  if (eventIds.length === 0) return;
  await sql`update webhook_outbox set historied_at = now()
    from (select set_config('synchronous_commit', 'off', true)) as durability
    where id = any(${[...eventIds]}::text[])`.execute(db);
}

/**
 * Hands an event its publisher could not append (Redis unreachable) to the history relay. Until the
 * relay has moved it, every new publish in its organisation is handed over too (see
 * `publishPostWithWebhook`), so later events never overtake it.
 */
export async function handPostEventToRelay(
  db: Kysely<Database>,
  eventId: string,
  options: { markedByPublish?: boolean } = {},
): Promise<void> {
  if (options.markedByPublish) {
    // Recorded `historied_at` by its own publish statement (an in-process history) but never appended:
    // only its publisher could have appended it, so it is taken back from the mark.
    await sql`update webhook_outbox set history_handed_at = now(), historied_at = null where id = ${eventId}`.execute(
      db,
    );
    return;
  }
  await sql`update webhook_outbox set history_handed_at = now() where id = ${eventId} and historied_at is null`.execute(
    db,
  );
}
