import { type Database, orgOrderLock, orgOrderLockKey, type WebhookDelivery } from '@herald/db';
import { type Kysely, sql } from 'kysely';

/*
 * Replays: a delivery made PENDING again by hand (the tenant over GraphQL, an operator with `dlq
 * replay`). Part of the lease protocol (lease-protocol.ts, "Outside the four steps"): a replay clears
 * the lease, so an attempt in flight records its attempt but can no longer set the delivery's state,
 * and a FIFO endpoint's replayed delivery goes to the back of its line ("FIFO endpoints").
 */

/** Dead letters replayed per statement (each its own transaction): see {@link replayDeadLetters}. */
export const DEAD_LETTER_REPLAY_PAGE = 500;

/**
 * The values a replay gives a delivery so that it goes to the back of its endpoint's line when the
 * endpoint is FIFO (a fresh place from the outbox sequence, waiting: no `next_attempt_at`), and is due
 * now otherwise. The place is drawn under the organisation's ordering lock (@herald/db `orgOrderLock`),
 * after the replayed row is locked, so it is in commit order with the organisation's events: taken
 * here for the row (`locked: false`), or already taken by the statement for every organisation it
 * replays, in key order (`locked: true`, {@link orgOrderLocks}).
 * @param row how the replayed row (with its `endpoint_id` and `org_id`) is named in the statement
 */
export function replayedLinePlace(row: string, options: { locked: boolean }) {
  const fifo = sql`exists (select 1 from webhook_endpoints fifo_endpoint
    where fifo_endpoint.id = ${sql.ref(`${row}.endpoint_id`)} and fifo_endpoint.ordering = 'FIFO')`;
  const place = sql<string>`nextval(pg_get_serial_sequence('webhook_outbox', 'seq'))`;
  return {
    nextAttemptAt: sql<Date | null>`case when ${fifo} then null else now() end`,
    fifoSeq: options.locked
      ? sql<string | null>`case when ${fifo} then ${place} end`
      : sql<
          string | null
        >`case when ${fifo} then (select ${place} from ${sql.raw(orgOrderLock(`${row}.org_id`))} ordered) end`,
  };
}

/**
 * Takes the ordering locks of the organisations of `rows` (a CTE with `endpoint_id`) that have a FIFO
 * endpoint among them, in the order of their keys: a statement replaying several organisations' deliveries
 * takes them all before drawing any place, and two such statements never wait for each other.
 */
function orgOrderLocks(rows: string) {
  return sql`(select count(pg_advisory_xact_lock(fifo.key)) as locked from (
    select distinct ${sql.raw(orgOrderLockKey('endpoint.org_id'))} as key
    from ${sql.table(rows)} candidate join webhook_endpoints endpoint on endpoint.id = candidate.endpoint_id
    where endpoint.ordering = 'FIFO' and endpoint.deleted_at is null
    order by key) fifo)`;
}

/**
 * Makes a delivery due again now (or puts it at the back of its FIFO line), whatever its state, with a
 * fresh retry horizon; its attempt history stays. The lease is cleared: an attempt in flight records
 * its attempt but can no longer set the delivery's state (its lease no longer matches), so the replay
 * is never overwritten. One statement.
 * @returns the delivery, or undefined when it does not exist
 */
export async function replayWebhookDelivery(db: Kysely<Database>, id: string): Promise<WebhookDelivery | undefined> {
  const place = replayedLinePlace('webhook_deliveries', { locked: false });
  return (
    db
      // The row locked first: a replay racing this one waits, then sees the success already moved.
      .with('target', (db) =>
        db
          .selectFrom('webhook_deliveries')
          .select(['id', 'succeeded_at', 'success_status_code', 'success_duration_ms', 'success_response_body'])
          .where('id', '=', id)
          .forUpdate(),
      )
      // A success kept on the row (lease-protocol.ts, "Attempts") joins the attempts it is the last of.
      .with('moved', (db) =>
        db
          .insertInto('webhook_attempts')
          .columns(['delivery_id', 'at', 'status_code', 'duration_ms', 'error', 'response_body'])
          .expression(
            db
              .selectFrom('target')
              .select([
                'id',
                sql<Date>`succeeded_at`.as('at'),
                'success_status_code',
                sql<number>`coalesce(success_duration_ms, 0)`.as('duration_ms'),
                sql<null>`null`.as('error'),
                'success_response_body',
              ])
              .where('succeeded_at', 'is not', null),
          ),
      )
      .updateTable('webhook_deliveries')
      .set({
        status: 'PENDING',
        next_attempt_at: place.nextAttemptAt,
        fifo_seq: place.fifoSeq,
        horizon_from: sql<Date>`now()`,
        updated_at: sql<Date>`now()`,
        lease_token: null,
        leased_until: null,
        dead_letter_streamed_at: null,
        succeeded_at: null,
        success_status_code: null,
        success_duration_ms: null,
        success_response_body: null,
      })
      .where('id', '=', id)
      .where('id', 'in', (db) => db.selectFrom('target').select('id'))
      .returningAll()
      .executeTakeFirst()
  );
}

/** Which dead letters {@link replayDeadLetters} replays. */
export type DeadLetterSelection = { ids: readonly string[] } | { all: true; endpointId?: string };

export interface ReplayDeadLettersOptions {
  /** Deliveries per statement. @default {@link DEAD_LETTER_REPLAY_PAGE} */
  pageSize?: number;
  /** Called after each statement with the ids it replayed, oldest first (none: not called). */
  onPage?: (ids: string[]) => void | Promise<void>;
}

/**
 * Makes DEAD deliveries PENDING again with a fresh retry horizon, page by page: each page (at most
 * `pageSize` deliveries, oldest `seq` first) is one statement in its own short transaction, so a
 * replay of any number of dead letters never holds more than a page of row locks, nor one long
 * transaction. The one path for both doors: GraphQL's `replayDeadWebhookDeliveries` and `pnpm dlq
 * replay` (apps/webhook-dispatcher dlq-cli.ts).
 *
 * Per delivery it does what {@link replayWebhookDelivery} does: due now, or at the back of its FIFO
 * endpoint's line ({@link replayedLinePlace}; a page's deliveries take their places in `seq` order),
 * the lease cleared so an attempt still in flight cannot overwrite the replay, and streamed as a dead
 * letter again should it die again.
 *
 * Bounded: `{ all: true }` replays the deliveries DEAD with a `seq` up to the highest one DEAD when it
 * starts, walking forwards from page to page, so each is visited at most once; one replayed here that
 * dies again meanwhile, or one that dies after the start, is left for the next replay. Ids that are
 * not DEAD are left alone and not counted.
 * @returns how many deliveries were replayed
 */
export async function replayDeadLetters(
  db: Kysely<Database>,
  selection: DeadLetterSelection,
  options: ReplayDeadLettersOptions = {},
): Promise<number> {
  const pageSize = options.pageSize ?? DEAD_LETTER_REPLAY_PAGE;
  if (!Number.isInteger(pageSize) || pageSize < 1) throw new RangeError(`pageSize must be a positive integer`);
  let replayed = 0;
  const replayPage = async (page: ReturnType<typeof sql>) => {
    const { ids, scanned, lastSeq } = await replayStatement(db, page);
    replayed += ids.length;
    if (ids.length > 0) await options.onPage?.(ids);
    return { scanned, lastSeq };
  };
  if ('ids' in selection) {
    for (let i = 0; i < selection.ids.length; i += pageSize) {
      const ids = selection.ids.slice(i, i + pageSize);
      await replayPage(sql`select id, seq, endpoint_id from webhook_deliveries
        where id = any(${ids}::text[]) and status = 'DEAD'`);
    }
    return replayed;
  }
  const endpoint = selection.endpointId === undefined ? sql`` : sql`and endpoint_id = ${selection.endpointId}::text`;
  const { rows } = await sql<{ last: string | null }>`
    select max(seq)::text as last from webhook_deliveries where status = 'DEAD' ${endpoint}
  `.execute(db);
  const last = rows[0]?.last;
  if (!last) return 0;
  let after = '0';
  for (;;) {
    const page = await replayPage(sql`select id, seq, endpoint_id from webhook_deliveries
      where status = 'DEAD' and seq > ${after}::bigint and seq <= ${last}::bigint ${endpoint}
      order by seq limit ${pageSize}`);
    if (page.scanned < pageSize || page.lastSeq === null) return replayed;
    after = page.lastSeq;
  }
}

/** One page of a dead-letter replay: `page` selects the candidates (`id`, `seq`, `endpoint_id`). */
async function replayStatement(
  db: Kysely<Database>,
  page: ReturnType<typeof sql>,
): Promise<{ ids: string[]; scanned: number; lastSeq: string | null }> {
  const place = replayedLinePlace('page', { locked: true });
  const { rows } = await sql<{ ids: string[] | null; scanned: number; last_seq: string | null }>`
    with page as (${page} for update), ordered as (
      -- The page's rows are locked first, then its organisations' ordering locks, in key order.
      select locked from ${orgOrderLocks('page')} locks
    ), placed as (
      -- Places in a FIFO line are taken in seq order (the select list is evaluated after the sort),
      -- once the locks above are held.
      select page.id, ${place.nextAttemptAt} as next_attempt_at, ${place.fifoSeq} as fifo_seq
      from page cross join ordered order by page.seq
    ), replayed as (
      -- Re-checked on the row's latest version: one replayed meanwhile by someone else is left alone.
      update webhook_deliveries delivery
      set status = 'PENDING', next_attempt_at = placed.next_attempt_at, fifo_seq = placed.fifo_seq,
        horizon_from = now(), updated_at = now(),
        lease_token = null, leased_until = null, dead_letter_streamed_at = null
      from placed
      where delivery.id = placed.id and delivery.status = 'DEAD'
      returning delivery.id, delivery.seq
    )
    select (select array_agg(id order by seq) from replayed) as ids,
      (select count(1) from page)::int as scanned,
      (select max(seq) from page)::text as last_seq
  `.execute(db);
  const row = rows[0];
  return { ids: row?.ids ?? [], scanned: row?.scanned ?? 0, lastSeq: row?.last_seq ?? null };
}
