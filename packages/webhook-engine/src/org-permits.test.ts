import { randomUUID } from 'node:crypto';
import { createRedisClient } from '@herald/config/redis';
import { webhookRedisKeys } from '@herald/contracts';
import { pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createOrgPermits, LINGER_MS, type OrgPermits } from './org-permits.js';

// Two dispatchers' permits for one organisation, against a real Redis, without the rest of a
// dispatcher: what each may start, and how a busy one makes room for another that waits.

const redis = createRedisClient(inject('redisUrl'));
const keys = webhookRedisKeys(`herald-test:${randomUUID()}:`);
const logger = pino({ level: 'silent' });

// The same Redis through a client that counts the commands sent on it.
const counted = createRedisClient(inject('redisUrl'));
let commandsSent = 0;
const send = counted.sendCommand.bind(counted) as (...args: unknown[]) => unknown;
counted.sendCommand = ((...args: unknown[]) => {
  commandsSent++;
  return send(...args);
}) as typeof counted.sendCommand;

afterAll(async () => {
  await redis.quit();
  await counted.quit();
});

/** A dispatcher's side: its gate's counts for the organisation, set by the test. */
function dispatcher(name: string, cap: number, client = redis) {
  const counts = { inUse: 0, waiting: 0 };
  let changes = 0;
  const permits: OrgPermits = createOrgPermits({
    redis: client,
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

  it('keeps permits a steady trickle leaves unused for a moment: no script round trip per attempt', async () => {
    const orgId = `org-${randomUUID()}`;
    const alone = dispatcher('trickle', 4, counted);
    await counted.ping();
    const before = commandsSent;
    // 40 attempts one after another, each started when the last has ended, as a gate would: it asks
    // only when short. Giving back and taking again each time would be 80 script calls.
    for (let attempt = 0; attempt < 40; attempt++) {
      if (alone.permits.limit(orgId) < 1) {
        alone.counts.waiting = 1;
        alone.permits.want(orgId, 1);
        await until('a permit', () => alone.permits.limit(orgId) >= 1);
      }
      alone.counts.waiting = 0;
      alone.counts.inUse = 1;
      await new Promise((resolve) => setImmediate(resolve));
      alone.counts.inUse = 0;
      alone.permits.released(orgId);
    }
    expect(commandsSent - before).toBeLessThanOrEqual(8);
    // Idle past the linger: what it held goes back.
    await until('the unused permit given back', () => alone.permits.limit(orgId) === 0, LINGER_MS * 20);
    expect(await alone.permits.inFlight(orgId)).toBe(0);
    await alone.permits.stop();
  });

  it('a dispatcher waiting for permits another holds unused gets them once the linger is over', async () => {
    const orgId = `org-${randomUUID()}`;
    const a = dispatcher('lingering', 4);
    const b = dispatcher('waiting', 4);
    a.counts.waiting = 4;
    a.permits.want(orgId, 4);
    await until('A holding the cap', () => a.permits.limit(orgId) === 4);
    // A's attempts all end and nothing waits there: it keeps the 4 a moment.
    a.counts.waiting = 0;
    a.permits.released(orgId);
    expect(a.permits.limit(orgId)).toBe(4);
    b.counts.waiting = 2;
    b.permits.want(orgId, 2);
    await until('B holding what it waits for', () => b.permits.limit(orgId) === 2, 5_000);
    expect(a.permits.limit(orgId)).toBe(0);
    await Promise.all([a.permits.stop(), b.permits.stop()]);
  });
});
