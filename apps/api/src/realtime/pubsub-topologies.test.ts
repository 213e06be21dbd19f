import { randomUUID } from 'node:crypto';
import { subscriptionRedisKeys } from '@herald/contracts';
import type { Post } from '@herald/db';
import {
  type RedisClusterSetup,
  type RedisSentinelSetup,
  startRedisCluster,
  startRedisSentinel,
} from '@herald/testing';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiMetrics } from '../metrics.js';
import { createPubSubService, type PubSubService } from './pubsub.js';

// Pub/sub between two pods through REDIS_URL forms other than one endpoint, on real servers of the
// test's own: a master and replica behind a sentinel, and a 3-master Redis Cluster.

let sentinel: RedisSentinelSetup;
let cluster: RedisClusterSetup;
const opened: Array<PubSubService & { redisUrl: string }> = [];

beforeAll(async () => {
  const [sentinelStarted, clusterStarted] = await Promise.allSettled([startRedisSentinel(), startRedisCluster()]);
  if (sentinelStarted.status === 'fulfilled') sentinel = sentinelStarted.value;
  if (clusterStarted.status === 'fulfilled') cluster = clusterStarted.value;
  for (const started of [sentinelStarted, clusterStarted]) if (started.status === 'rejected') throw started.reason;
}, 40_000);

afterAll(async () => {
  await Promise.all(opened.map((service) => service.close()));
  await Promise.all([sentinel?.stop(), cluster?.stop()]);
});

const post = (orgId: string): Post => ({
  id: randomUUID(),
  seq: '1',
  org_id: orgId,
  author_id: 'u1',
  title: 'Across the topology',
  tags: [],
  status: 'PUBLISHED',
  created_at: new Date('2026-11-21T07:00:00Z'),
  published_at: new Date('2026-11-21T07:30:00Z'),
});

/** The pods' HERALD_REDIS_PREFIX. */
const PREFIX = 'herald-topologies:';

function service(redisUrl: string): PubSubService {
  const created = createPubSubService({
    redisUrl,
    redisPrefix: PREFIX,
    logger: pino({ level: 'silent' }),
    metrics: createApiMetrics(),
  });
  opened.push(Object.assign(created, { redisUrl }));
  return created;
}

/**
 * Publishes on `from` until `to` receives the event (subscribing is asynchronous, and after a failover
 * the clients take a moment to reconnect), for at most `timeoutMs`.
 */
async function deliver(
  from: PubSubService,
  to: PubSubService,
  timeoutMs = 5_000,
  orgId = `org-${randomUUID()}`,
): Promise<unknown> {
  let received: unknown;
  const stop = await to.history.listen(orgId, (entry) => {
    received ??= entry.event.post;
  });
  for (const deadline = Date.now() + timeoutMs; !received && Date.now() < deadline; ) {
    await from.publishPostPublished(post(orgId));
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  stop();
  return received;
}

describe('REDIS_URL=redis+sentinel://… (master and replica behind a sentinel)', () => {
  it('delivers an event published on one pod to a subscriber on another', async () => {
    const [podA, podB] = [service(sentinel.url), service(sentinel.url)];
    await Promise.all([podA.ready(5_000), podB.ready(5_000)]);
    expect(await deliver(podA, podB)).toMatchObject({ title: 'Across the topology' });
  });

  it('follows the new master after the master crashes, without restarting the pods', async () => {
    const [podA, podB] = [service(sentinel.url), service(sentinel.url)];
    await Promise.all([podA.ready(5_000), podB.ready(5_000)]);
    expect(await deliver(podA, podB)).toBeDefined();

    const [oldMaster, replica] = sentinel.dataPorts;
    expect(await sentinel.masterPort()).toBe(oldMaster);
    expect(await sentinel.crashMaster()).toBe(replica);

    expect(await deliver(podA, podB, 15_000)).toMatchObject({ title: 'Across the topology' });
    // Every sentinel pod's connections (this test's and the one before's) now live on the promoted replica.
    const pods = opened.filter((pod) => pod.redisUrl === sentinel.url).length;
    const promoted = new Redis({ port: replica, host: '127.0.0.1', password: sentinel.password });
    try {
      const clients = String(await promoted.client('LIST'));
      expect(clients.match(/name=herald-api-publish /g)?.length).toBe(pods);
      expect(clients.match(/name=herald-api-subscribe /g)?.length).toBe(pods);
    } finally {
      promoted.disconnect();
    }
  }, 40_000);

  it('refuses to become ready when no sentinel answers', async () => {
    await expect(service('redis+sentinel://127.0.0.1:1/herald').ready(300)).rejects.toThrow(/REDIS_URL/);
  });
});

describe('REDIS_URL=redis+cluster://… (3-master Redis Cluster)', () => {
  it('delivers an event published on one pod to a subscriber on another', async () => {
    const [podA, podB] = [service(cluster.url), service(cluster.url)];
    await Promise.all([podA.ready(5_000), podB.ready(5_000)]);
    expect(await deliver(podA, podB)).toMatchObject({ title: 'Across the topology' });
  });

  it('discovers the cluster from a single startup node, a different one per pod', async () => {
    const [first, , third] = cluster.ports;
    const only = (port: number | undefined) =>
      `redis+cluster://:${encodeURIComponent(cluster.password)}@127.0.0.1:${port}`;
    const [podA, podB] = [service(only(first)), service(only(third))];
    await Promise.all([podA.ready(5_000), podB.ready(5_000)]);
    expect(await deliver(podA, podB)).toMatchObject({ title: 'Across the topology' });
    expect(await deliver(podB, podA)).toMatchObject({ title: 'Across the topology' });
  });

  it('uses sharded pub/sub: the channel is a shard channel of the node owning its slot, never a plain channel', async () => {
    const [podA, podB] = [service(cluster.url), service(cluster.url)];
    await Promise.all([podA.ready(5_000), podB.ready(5_000)]);
    const orgId = `org-${randomUUID()}`;
    let received: unknown;
    const stop = await podB.history.listen(orgId, (entry) => {
      received ??= entry.event.post;
    });
    const { channel } = subscriptionRedisKeys(PREFIX, orgId);
    const nodes = cluster.ports.map((port) => new Redis({ port, host: '127.0.0.1', password: cluster.password }));
    try {
      const owner = Number(await nodes[0]!.cluster('KEYSLOT', channel));
      const shardChannels = async () =>
        Promise.all(nodes.map(async (node) => (await node.call('PUBSUB', 'SHARDCHANNELS')) as string[]));
      for (const deadline = Date.now() + 5_000; !(await shardChannels()).flat().includes(channel); ) {
        if (Date.now() > deadline) throw new Error(`${channel} never became a shard channel`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const holders = (await shardChannels()).flatMap((channels, i) => (channels.includes(channel) ? [i] : []));
      expect(holders).toHaveLength(1);
      const holderPort = cluster.ports[holders[0]!];
      const slots = (await nodes[0]!.cluster('SLOTS')).filter(([, , master]) => master?.[1] === holderPort);
      expect(slots.some(([start, end]) => start <= owner && owner <= end)).toBe(true);
      for (const node of nodes) expect(await node.pubsub('CHANNELS')).not.toContain(channel);

      await podA.publishPostPublished(post(orgId));
      for (const deadline = Date.now() + 5_000; !received && Date.now() < deadline; ) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(received).toMatchObject({ title: 'Across the topology' });
    } finally {
      stop();
      for (const node of nodes) node.disconnect();
    }
  });

  it('delivers again after a master is restarted, without restarting the pods', async () => {
    const [podA, podB] = [service(cluster.url), service(cluster.url)];
    await Promise.all([podA.ready(5_000), podB.ready(5_000)]);
    const restarted = cluster.ports[1]!;
    const node = new Redis({ port: restarted, host: '127.0.0.1', password: cluster.password });
    // An organisation whose channel lives on the master that will be restarted.
    let orgId = '';
    try {
      const owned = (await node.cluster('SLOTS')).filter(([, , master]) => master?.[1] === restarted);
      for (let i = 0; !orgId; i++) {
        const candidate = `org-restart-${i}-${randomUUID()}`;
        const slot = Number(await node.cluster('KEYSLOT', subscriptionRedisKeys(PREFIX, candidate).channel));
        if (owned.some(([start, end]) => start <= slot && slot <= end)) orgId = candidate;
      }
    } finally {
      node.disconnect();
    }
    expect(await deliver(podA, podB, 5_000, orgId)).toMatchObject({ title: 'Across the topology' });
    await cluster.restartNode(restarted);
    expect(await deliver(podA, podB, 20_000, orgId)).toMatchObject({ title: 'Across the topology' });
    expect(await deliver(podA, podB, 20_000)).toMatchObject({ title: 'Across the topology' });
  }, 90_000);

  it('refuses to become ready when no node answers', async () => {
    await expect(service('redis+cluster://127.0.0.1:1').ready(300)).rejects.toThrow(/REDIS_URL/);
  });
});
