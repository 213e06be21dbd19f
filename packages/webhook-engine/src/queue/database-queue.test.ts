import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createConsumer, MAX_ENTRY_RECEIVES } from '../consumer.js';
import { createDispatcherHarness, type DispatcherHarness } from '../testing/harness.js';
import { createDatabaseQueue } from './database-queue.js';

let harness: DispatcherHarness;

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
});

afterAll(async () => {
  await harness?.close();
});

describe('the database queue (embedded mode)', () => {
  it(`counts receives and parks an entry that keeps failing after ${MAX_ENTRY_RECEIVES} of them`, async () => {
    const queue = createDatabaseQueue({ db: harness.db });
    await queue.enqueue([{ kind: 'delivery', deliveryIds: ['del_poison_db'], endpointId: 'we_poison', lease: 'q:x' }]);
    let handled = 0;
    const receives: number[] = [];
    const consumer = createConsumer({
      queue,
      consumerName: 'poison-db-test',
      concurrency: 10,
      reclaimIdleMs: 40,
      blockMs: 50,
      logger: pino({ level: 'silent' }),
      async handle(entries) {
        handled++;
        receives.push(...entries.map((entry) => entry.receives ?? 0));
        throw new Error('always fails');
      },
    });
    consumer.start();
    try {
      const deadline = Date.now() + 15_000;
      while (Date.now() < deadline) {
        const left = await harness.db.selectFrom('webhook_queue').select('id').execute();
        if (left.length === 0) break;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      expect(await harness.db.selectFrom('webhook_queue').select('id').execute()).toEqual([]);
      expect(handled).toBe(MAX_ENTRY_RECEIVES);
      expect(receives).toEqual(Array.from({ length: MAX_ENTRY_RECEIVES }, (_, i) => i + 1));
    } finally {
      await consumer.stop();
    }
  });
});
