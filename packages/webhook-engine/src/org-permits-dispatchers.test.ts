import { randomUUID } from 'node:crypto';
import { startCuttableProxy } from '@herald/testing/cuttable-proxy';
import { waitFor } from '@herald/testing/ports';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { PRESENCE_RENEW_MS } from './dispatcher-presence.js';
import { dispatcherWorld } from './testing/dispatcher-world.js';
import { startSlowReceiver } from './testing/slow-receiver.js';

// An organisation's webhook attempts in flight (TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT, or its override in
// organization_limits) held across two real dispatchers, against PostgreSQL, Redis and a receiver whose
// every answer takes a while: the receiver never sees more at once, another organisation's deliveries
// go on meanwhile, a dead dispatcher's permits come back after the lease, and with Redis cut from one
// dispatcher both keep going on their shares with nothing lost.

/** How long the receiver takes to answer each POST. */
const ANSWER_MS = 200;

const world = dispatcherWorld(() => startSlowReceiver(ANSWER_MS));

/** Polls `check` every 10 ms until it holds, for at most a minute. */
const until = (what: string, check: () => boolean) => waitFor(what, check, { timeoutMs: 60_000, intervalMs: 10 });

/** An organisation with `endpoints` endpoints under `/<group>/…`, each getting `events` events. */
async function organisation(group: string, endpoints: number, events: number, inFlightOverride?: number) {
  const orgId = `org-${randomUUID()}`;
  for (let i = 0; i < endpoints; i++) await world.harness.createEndpoint(orgId, world.receiver.url(`/${group}/${i}`));
  if (inFlightOverride !== undefined) {
    await world.harness.db
      .insertInto('organization_limits')
      .values({ org_id: orgId, webhook_attempts_in_flight: inFlightOverride })
      .execute();
  }
  return { orgId, publish: () => world.harness.publish(orgId, events) };
}

/** The organisation's deliveries with their status and how many attempts each has recorded. */
async function deliveryRows(orgId: string) {
  const { rows } = await sql<{ status: string; attempt_count: number; attempts: number }>`
    select delivery.status, delivery.attempt_count,
      (select count(*)::int from webhook_attempt_log attempt where attempt.delivery_id = delivery.id) as attempts
    from webhook_deliveries delivery where delivery.org_id = ${orgId}
  `.execute(world.harness.db);
  return rows;
}

/**
 * Every delivery of the organisation SUCCEEDED at its first attempt, with one attempt row, once the
 * last outcomes are recorded (the receiver has answered them all; a busy host records them later),
 * and the receiver got no more than one POST per delivery.
 */
async function expectAllSucceededOnce(orgId: string, group: string, count: number) {
  await waitFor(
    'the last outcomes recorded',
    async () => (await deliveryRows(orgId)).every((row) => row.status !== 'PENDING'),
    { timeoutMs: 30_000, intervalMs: 50 },
  );
  const rows = await deliveryRows(orgId);
  expect(rows).toHaveLength(count);
  for (const row of rows) expect(row).toEqual({ status: 'SUCCEEDED', attempt_count: 1, attempts: 1 });
  expect(world.receiver.received(group)).toHaveLength(count);
}

describe("an organisation's attempts in flight across two dispatchers", () => {
  it('never exceed its override at the receiver, while another organisation goes on', async () => {
    // 6 endpoints × 10 events, 10 a time per endpoint per cluster: 60 at once without any cap, 8 with
    // the cap counted per dispatcher (4 each); 4 with it held across both.
    const storm = await organisation('storm', 6, 10, 4);
    const quiet = await organisation('quiet', 1, 5);
    const settings = { concurrency: 100, endpointConcurrency: 10, orgConcurrency: 100 };
    const first = await world.harness.startDispatcher(settings);
    const second = await world.harness.startDispatcher(settings);
    await storm.publish();
    await until('the storm under way', () => world.receiver.received('storm').length >= 4);
    await quiet.publish();
    await until("the quiet organisation's deliveries", () => world.receiver.received('quiet').length === 5);
    // Not behind the storm's backlog (60 at 4 a time and 200 ms each: 3 s).
    expect(world.receiver.received('storm').length).toBeLessThan(60);
    await until('the whole storm', () => world.receiver.received('storm').length === 60);
    expect(world.receiver.maxInFlight('storm')).toBeLessThanOrEqual(4);
    expect(world.receiver.maxInFlight('storm')).toBeGreaterThanOrEqual(2);
    await expectAllSucceededOnce(storm.orgId, 'storm', 60);
    const throttled = await first.metrics.registry.getSingleMetricAsString('herald_webhook_throttled_total');
    const throttledToo = await second.metrics.registry.getSingleMetricAsString('herald_webhook_throttled_total');
    const count = (text: string) => Number(/reason="org_in_flight"} (\d+)/.exec(text)?.[1] ?? 0);
    expect(count(throttled) + count(throttledToo)).toBeGreaterThan(0);
    await Promise.all([first.stop(), second.stop()]);
  }, 120_000);

  it('are given back by a dispatcher that died, once its lease is over, and only then', async () => {
    const org = await organisation('orphaned', 2, 5, 3);
    // A dispatcher that died holding all 3 permits, its lease ending in 1.5 s (by Redis's clock).
    const [seconds, micros] = (await world.harness.redis.time()) as unknown as [string, string];
    const expiresAt = Number(seconds) * 1_000 + Math.floor(Number(micros) / 1_000) + 1_500;
    await world.harness.redis.hset(world.harness.keys.orgInFlight(org.orgId), 'dead-dispatcher', `3:3:${expiresAt}`);
    const dispatcher = await world.harness.startDispatcher({ orgConcurrency: 100 });
    await org.publish();
    await until('every delivery', () => world.receiver.received('orphaned').length === 10);
    expect(Math.min(...world.receiver.received('orphaned'))).toBeGreaterThanOrEqual(expiresAt - 50);
    expect(world.receiver.maxInFlight('orphaned')).toBeLessThanOrEqual(3);
    await dispatcher.stop();
  }, 60_000);

  it('without Redis (one dispatcher, as embedded), holds the override in that dispatcher', async () => {
    const org = await organisation('alone', 4, 5, 2);
    const alone = await world.harness.startDispatcher({ endpointConcurrency: 10, orgConcurrency: 100 }, undefined, {
      throttlesRedisUrl: null,
    });
    await org.publish();
    await until('every delivery', () => world.receiver.received('alone').length === 20);
    expect(world.receiver.maxInFlight('alone')).toBe(2);
    await alone.stop();
  }, 60_000);

  it('with Redis cut from one dispatcher mid-run, both go on at their shares: nothing lost', async () => {
    const org = await organisation('cut', 4, 10, 4);
    const proxy = await startCuttableProxy(new URL(world.harness.redisUrl));
    try {
      const settings = { endpointConcurrency: 10, orgConcurrency: 100 };
      const cut = await world.harness.startDispatcher(settings, undefined, {
        throttlesRedisUrl: `redis://127.0.0.1:${proxy.port}`,
      });
      const kept = await world.harness.startDispatcher(settings);
      // Both have counted each other (a share while Redis is away is the cap over the dispatchers a
      // dispatcher last counted; one cut within a renewal of another's start still counts itself alone).
      const deadline = Date.now() + 10_000;
      while ((await world.harness.redis.zcard(world.harness.keys.dispatchers)) < 2) {
        if (Date.now() > deadline) throw new Error('timed out waiting for both dispatchers to be present');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await new Promise((resolve) => setTimeout(resolve, PRESENCE_RENEW_MS + 200));
      await org.publish();
      await until('the run under way', () => world.receiver.received('cut').length >= 4);
      proxy.cut();
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      proxy.restore();
      await until('every delivery', () => world.receiver.received('cut').length === 40);
      // The cut one on its own share (2), the other within the cap it sees through Redis (4).
      expect(world.receiver.maxInFlight('cut')).toBeLessThanOrEqual(4 + 2);
      await expectAllSucceededOnce(org.orgId, 'cut', 40);
      expect(await cut.readiness()).toEqual({ ready: true });
      await Promise.all([cut.stop(), kept.stop()]);
    } finally {
      await proxy.close();
    }
  }, 120_000);
});
