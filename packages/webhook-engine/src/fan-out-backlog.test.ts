import type { HeraldDatabase } from '@herald/db';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { fanOutOutbox } from './lease-protocol.js';
import { createDispatcherHarness, type DispatcherHarness } from './testing/harness.js';

/**
 * The fan-out over a backlog published faster than statistics follow: its next batch is read from the
 * pending-fan-out queue through its primary key in order, the read stops after the batch, and the events
 * are looked up in the outbox by `seq`. Inline, with the outbox's statistics from before the burst, each
 * batch once read and sorted every event still to fan out (quadratic in the backlog), and a plan made
 * while the tables were small could find the batch's rows by reading a whole table.
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

/** Index entries read so far through the queue's primary key, and rows read by sequential scans of either table. */
async function outboxReads(): Promise<{ queueEntries: number; sequentialRows: number }> {
  await sql`select pg_stat_force_next_flush()`.execute(single.db);
  // A statement of its own: the flush happens when the previous one ends.
  const { rows } = await sql<{ entries: string; sequential: string }>`
    select
      (select idx_tup_read from pg_stat_user_indexes
        where schemaname = ${harness.schema.schema} and indexrelname = 'webhook_outbox_pending_pkey') as entries,
      (select sum(seq_tup_read) from pg_stat_user_tables
        where schemaname = ${harness.schema.schema} and relname in ('webhook_outbox', 'webhook_outbox_pending')
      ) as sequential`.execute(single.db);
  return { queueEntries: Number(rows[0]?.entries ?? 0), sequentialRows: Number(rows[0]?.sequential ?? 0) };
}

describe('the fan-out over a backlog the statistics have not seen', () => {
  it(`reads a batch's worth of the queue per batch, oldest first, and no row by a sequential scan, with plans made while the outbox was small`, async () => {
    // The statistics stay as a small outbox had them (as after a burst, before autovacuum's ANALYZE).
    await harness.createEndpoint('org-backlog', 'http://127.0.0.1:9/backlog');
    await sql`alter table webhook_outbox set (autovacuum_enabled = false)`.execute(harness.db);
    await sql`alter table webhook_outbox_pending set (autovacuum_enabled = false)`.execute(harness.db);
    await sql`
      insert into webhook_outbox (id, org_id, type, body)
      select 'evt_early_' || n, 'org-backlog', 'post.published', '{}' from generate_series(1, ${EARLY}) n`.execute(
      harness.db,
    );
    await sql`analyze webhook_outbox`.execute(harness.db);
    await sql`analyze webhook_outbox_pending`.execute(harness.db);
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
      explain select seq from webhook_outbox_pending where seq < (select max(seq) from webhook_outbox_pending)`.execute(
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
      // This batch's entries twice (taken in order, then deleted by key), and at most the earlier batches'
      // (deleted, not vacuumed) on the way; reading the backlog would be BACKLOG entries or more.
      expect(after.queueEntries - before.queueEntries).toBeLessThanOrEqual(EARLY + BATCH * (pass + 2) + 10);
      expect(after.sequentialRows - before.sequentialRows).toBe(0);
    }
    // Oldest first: exactly the first three batches left the queue, and got their deliveries.
    const { rows } = await sql<{ id: string }>`
      select id from webhook_outbox event where id like 'evt_backlog_%'
        and not exists (select 1 from webhook_outbox_pending pending where pending.seq = event.seq)
      order by id`.execute(harness.db);
    const { rows: delivered } = await sql<{ event_id: string }>`
      select event_id from webhook_deliveries where event_id like 'evt_backlog_%' order by event_id`.execute(
      harness.db,
    );
    expect(delivered.map((row) => row.event_id)).toEqual(rows.map((row) => row.id));
    expect(rows.map((row) => row.id)).toEqual(
      Array.from({ length: 3 * BATCH }, (_, i) => `evt_backlog_${String(i + 1).padStart(5, '0')}`),
    );
  });
});
