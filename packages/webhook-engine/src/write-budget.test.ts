import type { HeraldDatabase } from '@herald/db';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { claimDeliveries, fanOutOutbox, recordOutcomes } from './lease-protocol.js';
import { createDispatcherHarness, type DispatcherHarness } from './testing/harness.js';
import { attemptOutcome } from './testing/outcomes.js';

/**
 * What PostgreSQL writes per webhook delivery: row versions (inserts, updates and how many of them were HOT,
 * deletes) per table, from `pg_stat_user_tables`, for one batch of deliveries through the engine's steps:
 * fan-out, claim, and one record of first-attempt successes. Write volume, not round trips, is what a
 * delivery costs PostgreSQL in a backlog (bench/results/webhooks-row-versions/README.md), so a change to the
 * statements or the indexes shows here first: fewer versions when a change saves work, and an update that
 * stops being HOT (a new index on a column a step changes) as a HOT count that drops.
 */

const EVENTS = 20;
let harness: DispatcherHarness;
/** One connection: its statistics are flushed on demand (`pg_stat_force_next_flush`) before each reading. */
let single: HeraldDatabase;

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  single = await harness.openSingleConnection();
});

afterAll(() => harness?.close());

interface Writes {
  inserted: number;
  updated: number;
  hot: number;
  deleted: number;
}
const TABLES = [
  'webhook_outbox',
  'webhook_outbox_pending',
  'webhook_deliveries',
  'webhook_attempts',
  'webhook_endpoint_slots',
] as const;

/** The tables' cumulative writes in this test file's schema, after flushing this connection's pending counts. */
async function writes(): Promise<Record<(typeof TABLES)[number], Writes>> {
  await sql`select pg_stat_force_next_flush()`.execute(single.db);
  // A statement of its own: the flush happens when the previous one ends.
  const { rows } = await sql<{ relname: string; ins: string; upd: string; hot: string; del: string }>`
    select relname, n_tup_ins as ins, n_tup_upd as upd, n_tup_hot_upd as hot, n_tup_del as del
    from pg_stat_user_tables where schemaname = ${harness.schema.schema}`.execute(single.db);
  const found = new Map(rows.map((row) => [row.relname, row]));
  return Object.fromEntries(
    TABLES.map((table) => {
      const row = found.get(table);
      return [
        table,
        {
          inserted: Number(row?.ins ?? 0),
          updated: Number(row?.upd ?? 0),
          hot: Number(row?.hot ?? 0),
          deleted: Number(row?.del ?? 0),
        },
      ];
    }),
  ) as Record<(typeof TABLES)[number], Writes>;
}

function minus(after: Writes, before: Writes): Writes {
  return {
    inserted: after.inserted - before.inserted,
    updated: after.updated - before.updated,
    hot: after.hot - before.hot,
    deleted: after.deleted - before.deleted,
  };
}

describe('the write budget of a webhook delivery', () => {
  it('fans out, claims and records 20 first-attempt successes in 3 row versions and a queue delete each, one of them HOT', async () => {
    await harness.createEndpoint('org-budget', 'http://127.0.0.1:9/budget');
    const published = await writes();
    // On this connection, so its counts are flushed on demand too (the harness's pool flushes them later).
    await sql`insert into webhook_outbox (id, org_id, type, body)
      select 'evt_budget_' || n, 'org-budget', 'post.published', '{}' from generate_series(1, ${EVENTS}) n`.execute(
      single.db,
    );
    const before = await writes();
    // Recording an event queues it for the fan-out: one outbox row and one narrow queue row each.
    expect({
      outbox: minus(before.webhook_outbox, published.webhook_outbox),
      pending: minus(before.webhook_outbox_pending, published.webhook_outbox_pending),
    }).toEqual({
      outbox: { inserted: EVENTS, updated: 0, hot: 0, deleted: 0 },
      pending: { inserted: EVENTS, updated: 0, hot: 0, deleted: 0 },
    });

    const { queued } = await fanOutOutbox(single.db, { limit: 100, queueLeaseMs: 60_000 });
    expect(queued).toHaveLength(EVENTS);
    const claimed = await claimDeliveries(single.db, { queued, endpointCap: EVENTS, leaseMs: 60_000 });
    expect(claimed).toHaveLength(EVENTS);
    const result = await recordOutcomes(
      single.db,
      claimed.map((delivery) => attemptOutcome(delivery, { durationMs: 3 })),
      { disableAfterMs: 86_400_000 },
    );
    expect(result.recorded.size).toBe(EVENTS);

    const after = await writes();
    const spent = Object.fromEntries(TABLES.map((table) => [table, minus(after[table], before[table])]));
    expect(spent).toEqual({
      // The fan-out only reads the outbox row; it deletes the event's queue row.
      webhook_outbox: { inserted: 0, updated: 0, hot: 0, deleted: 0 },
      webhook_outbox_pending: { inserted: 0, updated: 0, hot: 0, deleted: EVENTS },
      // Inserted by the fan-out (q-leased); the claim's a-lease is HOT (lease columns are in no index);
      // the record's SUCCEEDED is not (status and next_attempt_at are).
      webhook_deliveries: { inserted: EVENTS, updated: 2 * EVENTS, hot: EVENTS, deleted: 0 },
      // None: a success is kept on its delivery row by the record that sets SUCCEEDED.
      webhook_attempts: { inserted: 0, updated: 0, hot: 0, deleted: 0 },
      // The claim registers the lane's slots; the record without a hand-over gives them back.
      webhook_endpoint_slots: { inserted: 1, updated: 1, hot: 1, deleted: 0 },
    });
  });
});
