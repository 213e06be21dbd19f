import { randomUUID } from 'node:crypto';
import { createRedisClient } from '@herald/config/redis';
import { webhookRedisKeys } from '@herald/contracts';
import { pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createOrgPermits, type OrgPermits } from './org-permits.js';

// Two dispatchers' permits for one organisation, against a real Redis, without the rest of a
// dispatcher: what each may start, and how a busy one makes room for another that waits.

const redis = createRedisClient(inject('redisUrl'));
const keys = webhookRedisKeys(`herald-test:${randomUUID()}:`);
const logger = pino({ level: 'silent' });

afterAll(async () => {
  await redis.quit();
});

/** A dispatcher's side: its gate's counts for the organisation, set by the test. */
function dispatcher(name: string, cap: number) {
  const counts = { inUse: 0, waiting: 0 };
  let changes = 0;
  const permits: OrgPermits = createOrgPermits({
    redis,
    keys,
    consumerName: name,
    leaseMs: 5_000,
    capOf: () => cap,
    onChange: () => changes++,
    dispatchers: () => 2,
    inUse: () => counts.inUse,
    waiting: () => counts.waiting,
    logger,
  });
  return { permits, counts, changes: () => changes };
}

async function until(what: string, check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('organisation permits shared by two dispatchers', () => {
  it('never hold more than the cap together, and a busy one gives back down to an even share when another waits', async () => {
    const orgId = `org-${randomUUID()}`;
    const a = dispatcher('a', 4);
    const b = dispatcher('b', 4);
    // A has a backlog: it takes the whole cap.
    a.counts.waiting = 8;
    a.permits.want(orgId, 8);
    await until('A holding the cap', () => a.permits.limit(orgId) === 4);
    a.counts.inUse = 4;
    a.counts.waiting = 4;
    // B's lane waits too: nothing is free.
    b.counts.waiting = 2;
    b.permits.want(orgId, 2);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(b.permits.limit(orgId)).toBe(0);
    expect(await a.permits.inFlight(orgId)).toBe(4);

    // A's attempts end one by one while its backlog still waits: it learns that B waits and keeps an
    // even share (2); what it gives back goes to B, at B's next try.
    for (let left = 3; left >= 2; left--) {
      a.counts.inUse = left;
      a.permits.released(orgId);
      await new Promise((resolve) => setTimeout(resolve, 150));
    }
    await until('B holding its share', () => b.permits.limit(orgId) === 2);
    expect(a.permits.limit(orgId)).toBe(2);
    expect(await a.permits.inFlight(orgId)).toBe(4);

    // Nothing waits at A any more and its attempts end: all it holds goes back.
    a.counts.inUse = 0;
    a.counts.waiting = 0;
    a.permits.released(orgId);
    await until('A holding nothing', () => a.permits.limit(orgId) === 0);
    expect(await b.permits.inFlight(orgId)).toBe(2);
    await Promise.all([a.permits.stop(), b.permits.stop()]);
    expect(await b.permits.inFlight(orgId)).toBe(0);
  });
});
