import { createRedisClient } from '@herald/config/redis';
import { newWebhookEventId } from '@herald/db';
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
    const publisher = createRedisClient(harness.redisUrl);
    let published = 0;
    const counting = new Proxy(publisher, {
      get(target, property, receiverObject) {
        if (property === 'publish' || property === 'spublish') {
          return (...args: unknown[]) => {
            published++;
            return (target as never as Record<string, (...a: unknown[]) => Promise<number>>)[property]!(...args);
          };
        }
        return Reflect.get(target, property, receiverObject);
      },
    });
    try {
      const wake = createOutboxWakePublisher(counting, channel());
      for (let i = 0; i < 100; i++) wake.wake();
      expect(await until(() => woken.every((n, i) => n >= before[i]! + 1), 5_000)).toBe(true);
      // One in flight, and one more for everything asked while it was.
      expect(published).toBeLessThanOrEqual(2);
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
    const insertQuietly = async () => {
      const id = newWebhookEventId();
      await harness.db
        .insertInto('webhook_outbox')
        .values({
          id,
          org_id: 'org-wake',
          type: 'post.published',
          body: JSON.stringify({ id, type: 'post.published' }),
        })
        .execute();
      return id;
    };
    // Without a wake-up (no NOTIFY, poll 60 s) the event waits.
    const quiet = await insertQuietly();
    expect(await until(() => receiver.requestsTo('/wake').length > 0, 700)).toBe(false);
    const publisher = createRedisClient(harness.redisUrl);
    try {
      createOutboxWakePublisher(publisher, channel()).wake();
      expect(await until(() => receiver.requestsTo('/wake').length === 1, 5_000)).toBe(true);
      expect(JSON.parse(receiver.requestsTo('/wake')[0]!.body).id).toBe(quiet);
    } finally {
      await publisher.quit();
    }
  });
});
