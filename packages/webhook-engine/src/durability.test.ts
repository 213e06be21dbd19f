import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createDurabilityBarrier, flushCommits } from './lease-protocol.js';
import { createDispatcherHarness, type DispatcherHarness } from './testing/harness.js';

let harness: DispatcherHarness;

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
});

afterAll(async () => {
  await harness?.close();
});

describe('the durability barrier', () => {
  it('returns once the WAL is flushed past a commit made without waiting for the flush', async () => {
    const { rows } = await sql<{ lsn: string }>`
      with written as (
        insert into webhook_outbox (id, org_id, type, body) values ('evt_barrier', 'org-barrier', 't', '{}')
      )
      select pg_current_wal_insert_lsn()::text as lsn, set_config('synchronous_commit', 'off', true) as off
    `.execute(harness.db);
    await flushCommits(harness.db);
    const { rows: flushed } = await sql<{ ok: boolean }>`
      select pg_current_wal_flush_lsn() >= ${rows[0]!.lsn}::pg_lsn as ok
    `.execute(harness.db);
    expect(flushed[0]!.ok).toBe(true);
  });

  it('makes each waiter wait for a flush that started after it asked, and shares flushes', async () => {
    const started: number[] = [];
    const finishers: Array<() => void> = [];
    const barrier = createDurabilityBarrier(
      () =>
        new Promise<void>((resolve) => {
          started.push(started.length);
          finishers.push(resolve);
        }),
    );
    const settled: string[] = [];
    const first = barrier.wait().then(() => settled.push('first'));
    // Both asked while flush 0 was running: it may have started before their commits.
    const second = barrier.wait().then(() => settled.push('second'));
    const third = barrier.wait().then(() => settled.push('third'));
    expect(started).toEqual([0]);
    finishers[0]!();
    await first;
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toEqual(['first']);
    // One flush (1) serves both later waiters.
    expect(started).toEqual([0, 1]);
    finishers[1]!();
    await Promise.all([second, third]);
    expect(settled).toEqual(['first', 'second', 'third']);
    expect(started).toEqual([0, 1]);
  });
});
