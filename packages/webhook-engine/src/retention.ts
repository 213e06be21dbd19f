import type { Database } from '@herald/db';
import { type Kysely, sql } from 'kysely';
import type { Logger } from 'pino';
import { releaseWebhookFifoLines } from './lease-protocol.js';

/** Rows deleted per statement: each batch is a short transaction, never an unbounded delete. */
export const RETENTION_BATCH_ROWS = 500;
/** Statements per table per pass, so one pass ends even while rows keep coming. */
const RETENTION_MAX_BATCHES = 200;

export interface RetentionOptions {
  db: Kysely<Database>;
  logger: Logger;
  /** Rows older than this are deleted (`WEBHOOK_RETENTION`). */
  retentionMs: number;
  /** Pause between passes; keep it at or under 10 min so expired rows go soon after they expire. */
  intervalMs: number;
}

export interface RetentionResult {
  /** False when another process held the retention lock: this pass did nothing. */
  ran: boolean;
  /** SUCCEEDED and SKIPPED deliveries deleted (their attempts go with them). */
  deliveries: number;
  /** Dispatched outbox events deleted (only once no delivery refers to them). */
  events: number;
  /** Deliveries of deleted endpoints purged, and endpoints purged. */
  purgedDeliveries: number;
  purgedEndpoints: number;
  /** Slot registrations of lanes that ended or died a while ago (none are left behind for long). */
  slots: number;
  /** Deliveries left waiting in the line of an endpoint no longer FIFO, made due. */
  released: number;
}

export interface Retention {
  start(): void;
  stop(): Promise<void>;
  runOnce(): Promise<RetentionResult>;
}

/**
 * Keeps rows from growing forever: SUCCEEDED and SKIPPED deliveries (with their attempts,
 * in the same statement) and outbox events fanned out and recorded before the retention are deleted in batches of
 * {@link RETENTION_BATCH_ROWS}; DEAD deliveries are kept (replayable). Endpoints deleted over GraphQL
 * (soft-deleted) are purged the same way, deliveries (and their attempts) first, then the endpoint and
 * its slot rows, so no request ever runs an unbounded delete. Each
 * batch is a transaction holding `pg_try_advisory_xact_lock`: one process at a time does it, the
 * others skip.
 */
export function createRetention(options: RetentionOptions): Retention {
  const { db, logger } = options;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;

  /** Runs `statement` under the retention lock; undefined when another process holds it. */
  async function locked(statement: ReturnType<typeof sql<{ id: string }>>): Promise<number | undefined> {
    return db.transaction().execute(async (trx) => {
      const { rows } = await sql<{ locked: boolean }>`
        select pg_try_advisory_xact_lock(hashtext(current_schema() || ':herald-webhook-retention')) as locked
      `.execute(trx);
      if (!rows[0]?.locked) return undefined;
      return (await statement.execute(trx)).rows.length;
    });
  }

  async function drain(statement: () => ReturnType<typeof sql<{ id: string }>>): Promise<number | undefined> {
    let total = 0;
    for (let batch = 0; batch < RETENTION_MAX_BATCHES; batch++) {
      const deleted = await locked(statement());
      if (deleted === undefined) return batch === 0 ? undefined : total;
      total += deleted;
      if (deleted < RETENTION_BATCH_ROWS) break;
    }
    return total;
  }

  /**
   * A CTE deleting the attempts of the deliveries a `gone` CTE deleted: no foreign key cascades them
   * (the migration `webhook-hot-path-without-foreign-keys`).
   */
  const attemptsOfGone = sql`attempts as (delete from webhook_attempts where delivery_id in (select id from gone))`;

  async function runOnce(): Promise<RetentionResult> {
    const cutoff = sql`now() - (${options.retentionMs}::double precision * interval '1 millisecond')`;
    const result: RetentionResult = {
      ran: false,
      deliveries: 0,
      events: 0,
      purgedDeliveries: 0,
      purgedEndpoints: 0,
      slots: 0,
      released: 0,
    };
    const deliveries = await drain(
      () => sql<{ id: string }>`
        with gone as (
          delete from webhook_deliveries where id in (
            select id from webhook_deliveries
            where status in ('SUCCEEDED', 'SKIPPED') and updated_at < ${cutoff}
            limit ${RETENTION_BATCH_ROWS}
          ) returning id
        ), ${attemptsOfGone}
        select id from gone`,
    );
    if (deliveries === undefined) return result;
    result.ran = true;
    result.deliveries = deliveries;
    result.purgedDeliveries =
      (await drain(
        () => sql<{ id: string }>`
        with gone as (
          delete from webhook_deliveries where id in (
            (
              -- Not one being attempted: the attempt's record (another snapshot) would insert its
              -- attempt row after this statement had deleted the others.
              select delivery.id from webhook_endpoints endpoint
              join webhook_deliveries delivery on delivery.endpoint_id = endpoint.id
              where endpoint.deleted_at is not null
                and not coalesce(delivery.lease_token like 'a:%' and delivery.leased_until > now(), false)
              limit ${RETENTION_BATCH_ROWS}
            ) union all (
              -- DEAD deliveries of an endpoint deleted by hand (no foreign key took them along), which
              -- no listing shows; other statuses of them are SKIPPED by claims and go as SKIPPED rows do.
              select delivery.id from webhook_deliveries delivery
              where delivery.status = 'DEAD'
                and not exists (select 1 from webhook_endpoints endpoint where endpoint.id = delivery.endpoint_id)
              limit ${RETENTION_BATCH_ROWS}
            )
          ) returning id
        ), ${attemptsOfGone}
        select id from gone`,
      )) ?? 0;
    result.purgedEndpoints =
      (await drain(
        () => sql<{ id: string }>`
        with gone as (
          delete from webhook_endpoints where id in (
            select id from webhook_endpoints endpoint where deleted_at is not null
              and not exists (select 1 from webhook_deliveries delivery where delivery.endpoint_id = endpoint.id)
            limit ${RETENTION_BATCH_ROWS}
          ) returning id
        ), slots as (
          delete from webhook_endpoint_slots where endpoint_id in (select id from gone)
        )
        select id from gone`,
      )) ?? 0;
    // Claims drop an endpoint's dead registrations when they find work there; an endpoint that gets no
    // more work keeps its last ones until here. A registration being renewed right now (a lane claiming
    // again under its lease) is skipped, and the condition is checked again on the row as deleted.
    result.slots =
      (await drain(
        () => sql<{ id: string }>`
        delete from webhook_endpoint_slots
        where (endpoint_id, lease) in (
          select endpoint_id, lease from webhook_endpoint_slots where leased_until < now() - interval '1 minute'
          limit ${RETENTION_BATCH_ROWS}
          for update skip locked
        ) and leased_until < now() - interval '1 minute'
        returning endpoint_id as id`,
      )) ?? 0;
    result.released = (await drain(() => releaseWebhookFifoLines(RETENTION_BATCH_ROWS))) ?? 0;
    // The subscription history also reads the outbox: where it marks what it has taken
    // (`historied_at`), a post.published event it has not taken yet is kept.
    const { rows: history } = await sql<{ present: boolean }>`
      select exists (select 1 from information_schema.columns where table_schema = current_schema()
        and table_name = 'webhook_outbox' and column_name = 'historied_at') as present
    `.execute(db);
    const taken = history[0]?.present
      ? sql`and (event.historied_at is not null or event.type <> 'post.published')`
      : sql``;
    result.events =
      (await drain(
        () => sql<{ id: string }>`
        delete from webhook_outbox where id in (
          select id from webhook_outbox event
          where created_at < ${cutoff} ${taken}
            and not exists (select 1 from webhook_outbox_pending pending where pending.seq = event.seq)
            and not exists (select 1 from webhook_deliveries delivery where delivery.event_id = event.id)
          order by created_at
          limit ${RETENTION_BATCH_ROWS}
        ) returning id`,
      )) ?? 0;
    if (
      result.deliveries +
        result.events +
        result.purgedDeliveries +
        result.purgedEndpoints +
        result.slots +
        result.released >
      0
    ) {
      logger.info(result, 'webhook retention deleted old rows');
    }
    return result;
  }

  function schedule(): void {
    timer = setTimeout(() => {
      running = runOnce()
        .catch((error: unknown) => logger.warn({ err: error }, 'webhook retention pass failed'))
        .finally(() => {
          running = undefined;
          if (timer) schedule();
        });
    }, options.intervalMs);
    timer.unref();
  }

  return {
    start() {
      if (!timer) schedule();
    },
    async stop() {
      clearTimeout(timer);
      timer = undefined;
      await running;
    },
    runOnce,
  };
}
