import { randomUUID } from 'node:crypto';
import { createRedisClient } from '@herald/config/redis';
import { webhookRedisKeys } from '@herald/contracts';
import { type RedisClusterSetup, type RedisSentinelSetup, startSentinelAndCluster } from '@herald/testing';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStreamQueue } from './redis-stream-queue.js';
import type { DeadLetter, WebhookQueue, WorkMessage } from './webhook-queue.js';

// The dispatcher's work stream and consumer group through REDIS_URL forms other than one endpoint, on
// real servers of the test's own: a master and replica behind a sentinel, and a 3-master Redis Cluster.

let sentinel: RedisSentinelSetup;
let cluster: RedisClusterSetup;
const cleanups: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  ({ sentinel, cluster } = await startSentinelAndCluster());
}, 40_000);

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  await Promise.all([sentinel?.stop(), cluster?.stop()]);
});

const logger = pino({ level: 'silent' });

function queueOn(redisUrl: string): WebhookQueue & { keys: ReturnType<typeof webhookRedisKeys> } {
  const keys = webhookRedisKeys(`herald-test:${randomUUID()}:`);
  const queue = createRedisStreamQueue({ redisUrl, keys, logger });
  cleanups.push(async () => {
    await queue.close();
    const client = createRedisClient(redisUrl);
    // One key per DEL: on a cluster the two streams may sit on different nodes.
    await Promise.all([client.del(keys.workStream), client.del(keys.deadLetterStream)]);
    await client.quit();
  });
  return Object.assign(queue, { keys });
}

const event: WorkMessage = { kind: 'delivery', deliveryIds: ['del_topology0'], endpointId: 'we_topology', lease: 'l0' };
const delivery: WorkMessage = {
  kind: 'delivery',
  deliveryIds: ['del_topology'],
  endpointId: 'we_topology',
  lease: 'l1',
};
const letter: DeadLetter = {
  deliveryId: 'del_dead',
  eventId: 'evt_dead',
  eventType: 'post.published',
  orgId: 'org-topology',
  endpointId: 'we_dead',
  url: 'https://receiver.example/hook',
  attempts: 12,
  lastStatusCode: 503,
  lastError: null,
  deadAt: '2026-11-21T08:00:00.000Z',
};

describe.each([
  ['redis+sentinel://', () => sentinel.url],
  ['redis+cluster://', () => cluster.url],
])('the Redis stream queue on %s', (_form, url) => {
  it('enqueues, reads through the consumer group, reclaims, acknowledges and parks dead letters', async () => {
    const queue = queueOn(url());
    await queue.init();
    await queue.ping();

    await queue.enqueue([event, delivery]);
    expect(await queue.lag()).toBe(2);
    const read = await queue.read('dispatcher-1', 10, 1_000);
    expect(read.map((entry) => entry.message)).toEqual([event, delivery]);
    expect(await queue.lag()).toBe(0);

    // Unacknowledged entries stay pending: another dispatcher can take them over.
    const reclaimed = await queue.reclaim('dispatcher-2', 0, 10);
    expect(reclaimed.map((entry) => entry.id)).toEqual(read.map((entry) => entry.id));
    await queue.ack(reclaimed.map((entry) => entry.id));
    expect(await queue.reclaim('dispatcher-2', 0, 10)).toEqual([]);

    await queue.deadLetter(letter);
    const client = createRedisClient(url());
    const fed = await client.xrange(queue.keys.deadLetterStream, '-', '+');
    await client.quit();
    expect(fed).toHaveLength(1);
    expect(fed[0]?.[1]).toEqual(expect.arrayContaining(['deliveryId', 'del_dead', 'attempts', '12']));
  });
});

describe('the keys Herald writes on redis+cluster://', () => {
  it('are all hash-tagged into one slot, listed from every master', async () => {
    const prefix = `herald-test:${randomUUID()}:`;
    const keys = webhookRedisKeys(prefix);
    const queue = createRedisStreamQueue({ redisUrl: cluster.url, keys, logger });
    const client = createRedisClient(cluster.url);
    cleanups.push(async () => {
      await queue.close();
      await Promise.all([client.del(keys.workStream), client.del(keys.deadLetterStream)]);
      await client.quit();
    });
    await queue.init();
    await queue.enqueue([event, delivery]);
    await queue.read('dispatcher-1', 10, 1_000);
    await queue.deadLetter(letter);

    // Every key with this installation's prefix, wherever it lives.
    const written: string[] = [];
    for (const port of cluster.ports) {
      const node = createRedisClient(`redis://:${encodeURIComponent(cluster.password)}@127.0.0.1:${port}`);
      try {
        let cursor = '0';
        do {
          const [next, found] = await node.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
          written.push(...found);
          cursor = next;
        } while (cursor !== '0');
      } finally {
        node.disconnect();
      }
    }
    expect(written.sort()).toEqual([keys.deadLetterStream, keys.workStream].sort());
    for (const key of written) expect(key).toMatch(/\{[^{}]+\}/);
    const slots = await Promise.all(written.map(async (key) => Number(await client.cluster('KEYSLOT', key))));
    expect(new Set(slots).size).toBe(1);
  });
});

describe('the Redis stream queue on redis+sentinel:// when the master crashes', () => {
  it('carries on with the promoted replica: the stream, the group and pending entries survive', async () => {
    const queue = queueOn(sentinel.url);
    await queue.init();
    let resets = 0; // after init, whose creation of the group counts as one
    queue.onReset(() => resets++);
    await queue.enqueue([event]);
    const [pending] = await queue.read('dispatcher-1', 10, 1_000);
    expect(pending?.message).toEqual(event);

    // Replication is asynchronous: crash only once the replica has the entry and its pending state.
    const [, replicaPort] = sentinel.dataPorts;
    const replica = createRedisClient(`redis://:${encodeURIComponent(sentinel.password)}@127.0.0.1:${replicaPort}`);
    cleanups.push(async () => replica.disconnect());
    const written = await masterReplicationOffset();
    await expect
      .poll(async () => replicationOffset(await replica.info('replication')), { timeout: 30_000 })
      .toBeGreaterThanOrEqual(written);

    await sentinel.crashMaster();

    // Commands made while the queue reconnects wait in ioredis's offline queue, then go to the new master.
    await queue.enqueue([delivery]);
    const fresh = await queue.read('dispatcher-1', 10, 1_000);
    expect(fresh.map((entry) => entry.message)).toEqual([delivery]);
    const reclaimed = await queue.reclaim('dispatcher-2', 0, 10);
    expect(reclaimed.map((entry) => entry.message)).toEqual([event, delivery]);
    await queue.ack(reclaimed.map((entry) => entry.id));
    expect(await queue.lag()).toBe(0);
    expect(resets).toBe(0); // never NOGROUP: nothing had to be handed out again
  }, 30_000);
});

/** The replication offset of the master the sentinel names. */
async function masterReplicationOffset(): Promise<number> {
  const master = createRedisClient(
    `redis://:${encodeURIComponent(sentinel.password)}@127.0.0.1:${await sentinel.masterPort()}`,
  );
  try {
    return replicationOffset(await master.info('replication'));
  } finally {
    master.disconnect();
  }
}

function replicationOffset(info: string): number {
  return Number(/master_repl_offset:(\d+)/.exec(info)?.[1] ?? -1);
}
