import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { outboxLagSeconds } from './dispatcher.js';
import { fanOutOutbox } from './lease-protocol.js';
import { createDispatcherHarness, type DispatcherHarness } from './testing/harness.js';

/**
 * `herald_webhook_outbox_lag_seconds`: the age of the oldest event still waiting for its fan-out, read from
 * the pending-fan-out queue. An event recorded with nothing to fan out never counts; once the fan-out took
 * the queue, the lag is 0.
 */

let harness: DispatcherHarness;

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
});

afterAll(() => harness?.close());

describe('the outbox lag', () => {
  it('is the age of the oldest queued event, ignores events recorded dispatched, and is 0 once fanned out', async () => {
    expect(await outboxLagSeconds(harness.db)).toBe(0);
    const hourAgo = new Date(Date.now() - 3_600_000);
    const minuteAgo = new Date(Date.now() - 60_000);
    // Recorded with nothing to fan out, long ago: not waiting.
    await sql`insert into webhook_outbox (id, org_id, type, body, created_at, dispatched_at)
      values ('evt_lag_done', 'org-lag', 'post.published', '{}', ${hourAgo}, ${hourAgo})`.execute(harness.db);
    expect(await outboxLagSeconds(harness.db)).toBe(0);
    await sql`insert into webhook_outbox (id, org_id, type, body, created_at)
      values ('evt_lag_waiting', 'org-lag', 'post.published', '{}', ${minuteAgo})`.execute(harness.db);
    const lag = await outboxLagSeconds(harness.db);
    expect(lag).toBeGreaterThanOrEqual(59);
    expect(lag).toBeLessThan(600);
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    expect(await outboxLagSeconds(harness.db)).toBe(0);
  });
});
