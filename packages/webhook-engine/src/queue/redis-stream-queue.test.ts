import { randomUUID } from 'node:crypto';
import { createRedisClient } from '@herald/config/redis';
import { webhookRedisKeys } from '@herald/contracts';
import { pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { compareStreamIds, createRedisStreamQueue, TRIM_INTERVAL_MS } from './redis-stream-queue.js';
import type { WorkMessage } from './webhook-queue.js';

// The work stream on one Redis server: what it keeps once entries are acknowledged.

const redisUrl = inject('redisUrl');
const logger = pino({ level: 'silent' });
const client = createRedisClient(redisUrl);
const cleanups: Array<() => Promise<unknown>> = [];

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  await client.quit();
});

function newQueue() {
  const keys = webhookRedisKeys(`herald-test:${randomUUID()}:`);
  const queue = createRedisStreamQueue({ redisUrl, keys, logger });
  cleanups.push(async () => {
    await queue.close();
    await client.del(keys.workStream, keys.deadLetterStream, keys.parkedStream);
  });
  return { queue, keys };
}

const message = (n: number): WorkMessage => ({
  kind: 'delivery',
  deliveryIds: [`del_trim${n}`],
  endpointId: 'we_trim',
  lease: `q:${n}`,
});

async function until(read: () => Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await read())) {
    if (Date.now() > deadline) throw new Error(`condition not met in ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('the work stream', () => {
  it('drops acknowledged entries, keeping the pending ones and those not read yet', async () => {
    const { queue, keys } = newQueue();
    await queue.init();
    await queue.enqueue(Array.from({ length: 30 }, (_, n) => message(n)));
    const read = await queue.read('dispatcher-1', 20, 1_000);
    expect(read).toHaveLength(20);
    // Entries 0–4 and 10–19 done; 5–9 still pending (being attempted); 20–29 not read yet.
    await queue.ack([...read.slice(0, 5), ...read.slice(10)].map((entry) => entry.id));
    await until(async () => (await client.xlen(keys.workStream)) === 25);

    // The oldest pending entry holds the trim back: nothing it precedes is dropped.
    const left = await client.xrange(keys.workStream, '-', '+');
    expect(left.map(([id]) => id)).toEqual(
      read
        .slice(5)
        .map((entry) => entry.id)
        .concat(left.slice(15).map(([id]) => id)),
    );
    await new Promise((resolve) => setTimeout(resolve, TRIM_INTERVAL_MS));
    await queue.ack(read.slice(5, 10).map((entry) => entry.id));
    // Now only the unread ten remain (and the last entry handed out, which the trim keeps).
    await until(async () => (await client.xlen(keys.workStream)) <= 11);
    const rest = await queue.read('dispatcher-1', 20, 1_000);
    expect(rest.map((entry) => entry.message)).toEqual(Array.from({ length: 10 }, (_, n) => message(20 + n)));
  });

  it('keeps everything while nothing was read', async () => {
    const { queue, keys } = newQueue();
    await queue.init();
    await queue.enqueue([message(1), message(2)]);
    await queue.ack(['0-1']);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await client.xlen(keys.workStream)).toBe(2);
  });
});

describe('compareStreamIds', () => {
  it('orders by time, then sequence, as numbers', () => {
    expect(compareStreamIds('10-0', '9-5')).toBe(1);
    expect(compareStreamIds('9-5', '9-10')).toBe(-1);
    expect(compareStreamIds('1700000000000-3', '1700000000000-3')).toBe(0);
  });
});
