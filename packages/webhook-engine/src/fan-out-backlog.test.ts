import type { HeraldDatabase } from '@herald/db';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { fanOutOutbox } from './lease-protocol.js';
import { createDispatcherHarness, type DispatcherHarness } from './testing/harness.js';

/**
 * The fan-out over a backlog published faster than statistics follow: its next batch is read through the
 * undispatched index in order, the read stops after the batch, and its rows are looked up by primary key.
 * Inline, with the outbox's statistics from before the burst, each batch read and sorted every undispatched
 * event (quadratic in the backlog), and a plan made while the outbox was small could find the batch's rows
 * by reading the whole table.
 */

const BACKLOG = 3000;
const BATCH = 100;
/** Events in the outbox when its statistics and the connection's plans are made: a few pages. */
const EARLY = 600;
let harness: DispatcherHarness;
/** One connection: its statistics are flushed on demand (`pg_stat_force_next_flush`) before each reading. */
let single: HeraldDatabase;

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  single = await harness.openSingleConnection();
});

afterAll(() => harness?.close());

/** Index entries read so far through the outbox's undispatched index, and rows read by sequential scans. */
async function outboxReads(): Promise<{ undispatchedEntries: number; sequentialRows: number }> {
  await sql`select pg_stat_force_next_flush()`.execute(single.db);
  // A statement of its own: the flush happens when the previous one ends.
  const { rows } = await sql<{ entries: string; sequential: string }>`
    select
      (select idx_tup_read from pg_stat_user_indexes
        where schemaname = ${harness.schema.schema} and indexrelname = 'webhook_outbox_undispatched_idx') as entries,
      (select seq_tup_read from pg_stat_user_tables
        where schemaname = ${harness.schema.schema} and relname = 'webhook_outbox') as sequential`.execute(single.db);
  return { undispatchedEntries: Number(rows[0]?.entries ?? 0), sequentialRows: Number(rows[0]?.sequential ?? 0) };
}

describe('the fan-out over a backlog the statistics have not seen', () => {
  it(`reads a batch's worth of the undispatched index per batch, oldest first, and no row by a sequential scan, with plans made while the outbox was small`, async () => {
    // The statistics stay as a small outbox had them (as after a burst, before autovacuum's ANALYZE).
    await sql`alter table webhook_outbox set (autovacuum_enabled = false)`.execute(harness.db);
    await sql`
      insert into webhook_outbox (id, org_id, type, body)
      select 'evt_early_' || n, 'org-backlog', 'post.published', '{}' from generate_series(1, ${EARLY}) n`.execute(
      harness.db,
    );
    await sql`analyze webhook_outbox`.execute(harness.db);
    // And the connection's plans are made while the outbox is small, as a dispatcher started before the
    // burst makes them: generic plans, which prepared statements and PL/pgSQL switch to after five runs
    // when those look no worse (forced here, so that the test does not hang on that estimate).
    await sql`set plan_cache_mode = force_generic_plan`.execute(single.db);
    for (let pass = 0; pass < EARLY / BATCH + 3; pass++) {
      const { events } = await fanOutOutbox(single.db, { limit: BATCH, queueLeaseMs: 60_000 });
      expect(events).toBe(Math.max(0, Math.min(BATCH, EARLY - pass * BATCH)));
    }
    await sql`
      insert into webhook_outbox (id, org_id, type, body)
      select 'evt_backlog_' || lpad(n::text, 5, '0'), 'org-backlog', 'post.published', '{"n":' || n || '}'
      from generate_series(1, ${BACKLOG}) n`.execute(harness.db);
    const { rows: planned } = await sql<{ plan: string }>`
      explain select id from webhook_outbox where dispatched_at is null order by seq limit ${BATCH}`.execute(
      harness.db,
    );
    // What the statement was exposed to: a planner that expects far fewer rows than the backlog.
    const estimate = Number(/rows=(\d+)/.exec(planned.map((row) => Object.values(row)[0]).join('\n'))?.[1]);
    expect(estimate).toBeLessThan(BACKLOG / 2);

    for (let pass = 0; pass < 3; pass++) {
      const before = await outboxReads();
      const { events } = await fanOutOutbox(single.db, { limit: BATCH, queueLeaseMs: 60_000 });
      const after = await outboxReads();
      expect(events).toBe(BATCH);
      // This batch's entries, and at most the earlier batches' (dispatched, so dead to this index) on the way;
      // reading the backlog would be BACKLOG entries or more.
      expect(after.undispatchedEntries - before.undispatchedEntries).toBeLessThanOrEqual(
        EARLY + BATCH * (pass + 1) + 10,
      );
      expect(after.sequentialRows - before.sequentialRows).toBe(0);
    }
    // Oldest first: exactly the first three batches are dispatched.
    const { rows } = await sql<{ id: string }>`
      select id from webhook_outbox where dispatched_at is not null and id like 'evt_backlog_%' order by id`.execute(
      harness.db,
    );
    expect(rows.map((row) => row.id)).toEqual(
      Array.from({ length: 3 * BATCH }, (_, i) => `evt_backlog_${String(i + 1).padStart(5, '0')}`),
    );
  });
});
