import { waitFor } from '@herald/testing/ports';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { fanOutOutbox } from './lease-protocol.js';
import { toWorkMessages } from './queue/webhook-queue.js';
import { createRelay } from './relay.js';
import { dispatcherWorld } from './testing/dispatcher-world.js';
import { startTestReceiver } from './testing/test-receiver.js';

// Redis loses the stream and its consumer group (a restart without persistence, or a deleted key):
// the dispatcher recreates both instead of hanging, and everything the database says is not done is
// handed out again at once (not only when their leases expire).

const world = dispatcherWorld(startTestReceiver);
const logger = pino({ level: 'silent' });

/** Deliveries named by the work stream's entries (an entry names all of one endpoint's in a batch). */
async function namedDeliveries(): Promise<number> {
  const entries = await world.harness.redis.xrange(world.harness.keys.workStream, '-', '+');
  let named = 0;
  for (const [, fields] of entries) {
    const at = fields.indexOf('deliveryIds');
    named += at >= 0 ? fields[at + 1]!.split(',').length : 0;
  }
  return named;
}

const ids = (path: string) =>
  new Set(world.receiver.requestsTo(path).map((request) => request.headers['x-webhook-id']));

describe('when Redis loses the stream and the group', () => {
  it('recreates them, and the relay and scheduler send again what was in the lost stream', async () => {
    await world.harness.createEndpoint('org-lost', world.receiver.url('/lost'));
    const relayedOnly = await world.harness.publish('org-lost', 20);
    const queue = world.harness.newQueue();
    await queue.init();

    // Relay 20 events into the stream with nobody consuming.
    const relay = createRelay({
      db: world.harness.db,
      queue,
      logger,
      batchSize: 100,
      pollIntervalMs: 10,
      queueLeaseMs: 60_000,
    });
    relay.start();
    await waitFor('the 20 deliveries in the stream', async () => (await namedDeliveries()) >= 20, {
      timeoutMs: 30_000,
      intervalMs: 10,
    });
    await relay.stop();
    expect(await namedDeliveries()).toBe(20);
    // One fan-out statement, one endpoint: one entry names them all.
    expect(await world.harness.redis.xlen(world.harness.keys.workStream)).toBe(1);

    // And 10 more that were already fanned out, with their deliveries queued in the stream.
    const queuedOnly = await world.harness.publish('org-lost', 10);
    const fanned = await fanOutOutbox(world.harness.db, { limit: 100, queueLeaseMs: 60_000 });
    await queue.enqueue(toWorkMessages(fanned.queued));
    expect(await namedDeliveries()).toBe(30);

    // Redis loses everything.
    await world.harness.redis.del(world.harness.keys.workStream);

    await world.harness.startDispatcher({ endpointConcurrency: 50 });
    const all = [...relayedOnly, ...queuedOnly];
    await world.receiver.waitFor(() => ids('/lost').size === all.length, 20_000);
    expect(ids('/lost')).toEqual(new Set(all));
    expect(await world.harness.redis.exists(world.harness.keys.workStream)).toBe(1);
    const groups = (await world.harness.redis.xinfo('GROUPS', world.harness.keys.workStream)) as unknown[][];
    expect(groups.map((group) => group[1])).toEqual([world.harness.keys.consumerGroup]);
  });

  it('keeps delivering when the stream disappears under a running dispatcher', async () => {
    world.receiver.behave(() => ({ status: 200, delayMs: 2 }), '/running');
    await world.harness.createEndpoint('org-running', world.receiver.url('/running'));
    const before = await world.harness.publish('org-running', 40);
    await world.receiver.waitFor(() => ids('/running').size >= 5, 20_000);
    await world.harness.redis.del(world.harness.keys.workStream);
    const after = await world.harness.publish('org-running', 20);
    await world.receiver.waitFor(() => ids('/running').size === before.length + after.length, 30_000);
    expect(ids('/running')).toEqual(new Set([...before, ...after]));
  });
});
