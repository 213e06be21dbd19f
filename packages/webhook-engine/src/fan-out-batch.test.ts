import { describe, expect, it } from 'vitest';
import { FAN_OUT_BATCH_SIZE } from './dispatcher.js';
import { dispatcherWorld } from './testing/dispatcher-world.js';
import { startTestReceiver } from './testing/test-receiver.js';

// How many outbox events one fan-out statement takes, against a real PostgreSQL schema and Redis stream.
// Every delivery one statement creates has the same `created_at` (its transaction's now()), so the
// number of distinct `created_at` values is the number of fan-out statements that made them.

const world = dispatcherWorld(startTestReceiver, { each: true });

/** Publishes `events` before any dispatcher runs, starts one, and waits until every delivery succeeded. */
async function drainBacklog(events: number, settings: { fanOutBatchSize?: number; batchSize?: number }) {
  await world.harness.createEndpoint('org-backlog', world.receiver.url('/backlog'));
  await world.harness.publish('org-backlog', events);
  await world.harness.startDispatcher(settings);
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { succeeded } = await world.harness.db
      .selectFrom('webhook_deliveries')
      .select((eb) => eb.fn.countAll<number>().as('succeeded'))
      .where('status', '=', 'SUCCEEDED')
      .executeTakeFirstOrThrow();
    if (Number(succeeded) === events) break;
    if (Date.now() > deadline) throw new Error(`${succeeded} of ${events} deliveries succeeded`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const statements = await world.harness.db
    .selectFrom('webhook_deliveries')
    .select(['created_at'])
    .select((eb) => eb.fn.countAll<number>().as('deliveries'))
    .groupBy('created_at')
    .orderBy('created_at')
    .execute();
  return statements.map((statement) => Number(statement.deliveries));
}

describe('the relay', () => {
  it('fans a backlog out in statements of fanOutBatchSize events, apart from the due scan’s batchSize', async () => {
    expect(await drainBacklog(25, { fanOutBatchSize: 10, batchSize: 200 })).toEqual([10, 10, 5]);
    expect(world.receiver.requestsTo('/backlog')).toHaveLength(25);
  });

  it(`takes ${FAN_OUT_BATCH_SIZE} events per statement by default, more than the due scan’s 200`, async () => {
    expect(await drainBacklog(FAN_OUT_BATCH_SIZE + 100, {})).toEqual([FAN_OUT_BATCH_SIZE, 100]);
  }, 60_000);
});
