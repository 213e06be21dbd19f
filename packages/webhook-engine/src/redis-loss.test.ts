import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { fanOutOutbox } from './lease-protocol.js';
import { toWorkMessages } from './queue/webhook-queue.js';
import { createRelay } from './relay.js';
import { createDispatcherHarness, type DispatcherHarness } from './testing/harness.js';
import { startTestReceiver, type TestReceiver } from './testing/test-receiver.js';

// Redis loses the stream and its consumer group (a restart without persistence, or a deleted key):
// the dispatcher recreates both instead of hanging, and everything the database says is not done is
// handed out again at once (not only when their leases expire).

let harness: DispatcherHarness;
let receiver: TestReceiver;
const logger = pino({ level: 'silent' });

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  receiver = await startTestReceiver();
});

afterAll(async () => {
  await receiver?.close();
  await harness?.close();
});

/** Deliveries named by the work stream's entries (an entry names all of one endpoint's in a batch). */
async function namedDeliveries(): Promise<number> {
  const entries = await harness.redis.xrange(harness.keys.workStream, '-', '+');
  let named = 0;
  for (const [, fields] of entries) {
    const at = fields.indexOf('deliveryIds');
    named += at >= 0 ? fields[at + 1]!.split(',').length : 0;
  }
  return named;
}

const ids = (path: string) => new Set(receiver.requestsTo(path).map((request) => request.headers['x-webhook-id']));

describe('when Redis loses the stream and the group', () => {
  it('recreates them, and the relay and scheduler send again what was in the lost stream', async () => {
    await harness.createEndpoint('org-lost', receiver.url('/lost'));
    const relayedOnly = await harness.publish('org-lost', 20);
    const queue = harness.newQueue();
    await queue.init();

    // Relay 20 events into the stream with nobody consuming.
    const relay = createRelay({
      db: harness.db,
      queue,
      logger,
      batchSize: 100,
      pollIntervalMs: 10,
      queueLeaseMs: 60_000,
    });
    relay.start();
    for (let i = 0; i < 200 && (await namedDeliveries()) < 20; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await relay.stop();
    expect(await namedDeliveries()).toBe(20);
    // One fan-out statement, one endpoint: one entry names them all.
    expect(await harness.redis.xlen(harness.keys.workStream)).toBe(1);

    // And 10 more that were already fanned out, with their deliveries queued in the stream.
    const queuedOnly = await harness.publish('org-lost', 10);
    const fanned = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    await queue.enqueue(toWorkMessages(fanned.queued));
    expect(await namedDeliveries()).toBe(30);

    // Redis loses everything.
    await harness.redis.del(harness.keys.workStream);

    await harness.startDispatcher({ endpointConcurrency: 50 });
    const all = [...relayedOnly, ...queuedOnly];
    await receiver.waitFor(() => ids('/lost').size === all.length, 20_000);
    expect(ids('/lost')).toEqual(new Set(all));
    expect(await harness.redis.exists(harness.keys.workStream)).toBe(1);
    const groups = (await harness.redis.xinfo('GROUPS', harness.keys.workStream)) as unknown[][];
    expect(groups.map((group) => group[1])).toEqual([harness.keys.consumerGroup]);
  });

  it('keeps delivering when the stream disappears under a running dispatcher', async () => {
    receiver.behave(() => ({ status: 200, delayMs: 2 }), '/running');
    await harness.createEndpoint('org-running', receiver.url('/running'));
    const before = await harness.publish('org-running', 40);
    await receiver.waitFor(() => ids('/running').size >= 5, 20_000);
    await harness.redis.del(harness.keys.workStream);
    const after = await harness.publish('org-running', 20);
    await receiver.waitFor(() => ids('/running').size === before.length + after.length, 30_000);
    expect(ids('/running')).toEqual(new Set([...before, ...after]));
  });
});
