import type { KyselyPlugin, RootOperationNode } from 'kysely';
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

/** Counts the claim statements (`update webhook_queue …`) run through the database it is plugged into. */
function claimCounter(): KyselyPlugin & { claims: number } {
  return {
    claims: 0,
    transformQuery({ node }) {
      const raw = node as RootOperationNode & { kind: string; sqlFragments?: readonly string[] };
      if (raw.kind === 'RawNode' && raw.sqlFragments?.join('').includes('update webhook_queue')) this.claims++;
      return node;
    },
    async transformResult({ result }) {
      return result;
    },
  };
}

describe('the database queue (embedded mode)', () => {
  it('claims once per batch of work: not again right after a short claim, and not for an empty enqueue', async () => {
    await harness.db.deleteFrom('webhook_queue').execute();
    const counter = claimCounter();
    const queue = createDatabaseQueue({ db: harness.db.withPlugin(counter) });
    const work = (id: string) => ({
      kind: 'delivery' as const,
      deliveryIds: [id],
      endpointId: 'we_batch',
      lease: 'q:b',
    });
    await queue.enqueue([work('del_first')]);
    const first = await queue.read('batch-test', 10, 5_000);
    expect(first.map((entry) => entry.message?.deliveryIds)).toEqual([['del_first']]);
    expect(counter.claims).toBe(1);

    // The last claim came back short and nothing was enqueued since: this read waits without claiming,
    // an empty enqueue (a fan-out with no subscribed endpoint) does not wake it, the next real one does.
    const second = queue.read('batch-test', 10, 30_000);
    await queue.enqueue([]);
    await queue.enqueue([work('del_second')]);
    expect((await second).map((entry) => entry.message?.deliveryIds)).toEqual([['del_second']]);
    expect(counter.claims).toBe(2);
    await harness.db.deleteFrom('webhook_queue').execute();
  });

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
