import { createRedisClient } from '@herald/config/redis';
import { newEventId } from '@herald/contracts';
import { startCuttableProxy } from '@herald/testing/cuttable-proxy';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createOutboxWakeListener, createOutboxWakePublisher, type OutboxWakeListener } from './outbox-wake.js';
import { createDispatcherHarness, type DispatcherHarness } from './testing/harness.js';
import { startTestReceiver, type TestReceiver } from './testing/test-receiver.js';

// Cluster mode's wake-up: API pods PUBLISH on Redis after committing outbox events (no NOTIFY in the
// publishing transaction), dispatchers subscribe and fan out at once instead of at the next poll.

let harness: DispatcherHarness;
let receiver: TestReceiver;
const logger = pino({ level: 'silent' });
const listeners: OutboxWakeListener[] = [];

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  receiver = await startTestReceiver(() => ({ status: 200 }));
});

afterAll(async () => {
  await Promise.all(listeners.map((listener) => listener.stop()));
  await receiver?.close();
  await harness?.close();
});

const channel = () => `${harness.keys.outboxWakeChannel}`;

async function until(done: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return true;
}

/** An outbox event committed without NOTIFY (as publishPost does in cluster mode): only a wake-up or a poll finds it. */
async function insertQuietly(orgId: string): Promise<string> {
  const id = newEventId();
  await harness.db
    .insertInto('webhook_outbox')
    .values({ id, org_id: orgId, type: 'post.published', body: JSON.stringify({ id, type: 'post.published' }) })
    .execute();
  return id;
}

describe('outbox wake-up through Redis', () => {
  it('wakes every listener, and coalesces a burst of wake-ups into few PUBLISHes', async () => {
    const woken = [0, 0];
    for (const index of [0, 1]) {
      const listener = createOutboxWakeListener({
        redisUrl: harness.redisUrl,
        channel: channel(),
        logger,
        onWake: () => woken[index]!++,
      });
      listeners.push(listener);
      await listener.start();
    }
    const before = [...woken];
    const { publisher, counting, published } = countingPublisher(harness.redisUrl);
    try {
      const wake = createOutboxWakePublisher(counting, channel());
      for (let i = 0; i < 100; i++) wake.wake();
      expect(await until(() => woken.every((n, i) => n >= before[i]! + 1), 20_000)).toBe(true);
      // One in flight, and one more for everything asked while it was.
      expect(published()).toBeLessThanOrEqual(2);
    } finally {
      await publisher.quit();
    }
  });

  it('sends at most one PUBLISH per interval for a steady stream of wake-ups, and one after the last', async () => {
    const channelName = `${channel()}:interval`;
    let heard = 0;
    let heardAt = 0;
    const listener = createOutboxWakeListener({
      redisUrl: harness.redisUrl,
      channel: channelName,
      logger,
      onWake: () => {
        heard++;
        heardAt = performance.now();
      },
    });
    listeners.push(listener);
    await listener.start();
    const { publisher, counting, published } = countingPublisher(harness.redisUrl);
    try {
      const wake = createOutboxWakePublisher(counting, channelName, () => {}, 50);
      const heardBefore = heard;
      const started = performance.now();
      // One wake-up per millisecond or so, as publishPost's commits at ~1,000/s.
      let lastWake = 0;
      for (let i = 0; i < 200; i++) {
        wake.wake();
        lastWake = performance.now();
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
      const elapsed = lastWake - started;
      // The last wake-up is not dropped: a message is heard after it.
      expect(await until(() => heardAt > lastWake, 20_000)).toBe(true);
      expect(heard).toBeGreaterThan(heardBefore);
      // At most one per 50 ms while they kept coming, plus the one after the last.
      expect(published()).toBeLessThanOrEqual(Math.ceil(elapsed / 50) + 2);
    } finally {
      await publisher.quit();
    }
  });

  it('fans an event committed without NOTIFY out at once when woken, not at the next poll', async () => {
    const dispatcher = await harness.startDispatcher({ pollIntervalMs: 60_000 });
    const listener = createOutboxWakeListener({
      redisUrl: harness.redisUrl,
      channel: channel(),
      logger,
      onWake: () => dispatcher.notifyOutbox(),
    });
    listeners.push(listener);
    await listener.start();
    await harness.createEndpoint('org-wake', receiver.url('/wake'));
    // Let the start-up passes (relay, listener) finish, so only a wake-up can find the next event.
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Without a wake-up (no NOTIFY, poll 60 s) the event waits.
    const quiet = await insertQuietly('org-wake');
    expect(await until(() => receiver.requestsTo('/wake').length > 0, 700)).toBe(false);
    const publisher = createRedisClient(harness.redisUrl);
    try {
      createOutboxWakePublisher(publisher, channel()).wake();
      expect(await until(() => receiver.requestsTo('/wake').length === 1, 20_000)).toBe(true);
      expect(JSON.parse(receiver.requestsTo('/wake')[0]!.body).id).toBe(quiet);
    } finally {
      await publisher.quit();
    }
  });
});

describe('when the wake-up listener loses Redis', () => {
  it('delivers what was committed meanwhile once Redis is back, and is woken again after', async () => {
    // Only the listener's connection goes through the proxy: the stream queue and the publisher keep
    // Redis. The relay polls once a minute, so nothing but the listener can find an event in time.
    // Its own channel: the earlier tests' listeners (subscribed directly) must not hear these wake-ups.
    const outageChannel = `${channel()}:outage`;
    const proxy = await startCuttableProxy(new URL(harness.redisUrl));
    const dispatcher = await harness.startDispatcher({ pollIntervalMs: 60_000 });
    const listener = createOutboxWakeListener({
      redisUrl: `redis://127.0.0.1:${proxy.port}`,
      channel: outageChannel,
      logger,
      onWake: () => dispatcher.notifyOutbox(),
    });
    listeners.push(listener);
    const publisher = createRedisClient(harness.redisUrl);
    try {
      await listener.start();
      await harness.createEndpoint('org-outage', receiver.url('/outage'));
      await new Promise((resolve) => setTimeout(resolve, 300));
      const wake = createOutboxWakePublisher(publisher, outageChannel);
      const delivered = () => receiver.requestsTo('/outage').map((request) => JSON.parse(request.body).id as string);

      const before = await insertQuietly('org-outage');
      wake.wake();
      expect(await until(() => delivered().includes(before), 20_000)).toBe(true);

      // Redis gone for the listener (~10 s): wake-ups sent meanwhile reach nobody.
      proxy.cut();
      const during: string[] = [];
      for (let i = 0; i < 5; i++) {
        during.push(await insertQuietly('org-outage'));
        wake.wake();
        await new Promise((resolve) => setTimeout(resolve, 2_000));
      }
      expect(delivered().filter((id) => during.includes(id))).toEqual([]);

      // Back: the listener reconnects and wakes the relay for what was committed while it was away…
      proxy.restore();
      expect(await until(() => during.every((id) => delivered().includes(id)), 20_000)).toBe(true);
      // …and is subscribed again: a wake-up after the outage is heard.
      const after = await insertQuietly('org-outage');
      wake.wake();
      expect(await until(() => delivered().includes(after), 20_000)).toBe(true);
      expect(delivered().filter((id) => id === after)).toHaveLength(1);
    } finally {
      await publisher.quit();
      await listener.stop();
      await proxy.close();
    }
  }, 90_000);
});

/** A Redis client whose PUBLISH/SPUBLISH calls are counted (`published()`); `counting` is what the publisher gets. */
function countingPublisher(redisUrl: string) {
  const publisher = createRedisClient(redisUrl);
  let count = 0;
  const counting = new Proxy(publisher, {
    get(target, property, receiverObject) {
      if (property === 'publish' || property === 'spublish') {
        return (...args: unknown[]) => {
          count++;
          return (target as never as Record<string, (...a: unknown[]) => Promise<number>>)[property]!(...args);
        };
      }
      return Reflect.get(target, property, receiverObject);
    },
  });
  return { publisher, counting, published: () => count };
}
