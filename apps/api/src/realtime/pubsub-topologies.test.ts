import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { subscriptionRedisKeys } from '@herald/contracts';
import type { Post } from '@herald/db';
import { type RedisClusterSetup, type RedisSentinelSetup, startSentinelAndCluster } from '@herald/testing';
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
  ({ sentinel, cluster } = await startSentinelAndCluster());
}, 40_000);

afterAll(async () => {
  await Promise.all(opened.map((service) => service.close()));
  await Promise.all([sentinel?.stop(), cluster?.stop()]);
});

const post = (orgId: string, title = 'Across the topology'): Post => ({
  id: randomUUID(),
  seq: '1',
  org_id: orgId,
  author_id: 'u1',
  title,
  tags: [],
  status: 'PUBLISHED',
  created_at: new Date('2026-11-21T07:00:00Z'),
  published_at: new Date('2026-11-21T07:30:00Z'),
});

/** The pods' HERALD_REDIS_PREFIX. */
const PREFIX = 'herald-topologies:';
const REDIS_CLI = process.env.REDIS_CLI_BINARY ?? 'redis-cli';

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
  timeoutMs = 15_000,
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
    await Promise.all([podA.ready(15_000), podB.ready(15_000)]);
    expect(await deliver(podA, podB)).toMatchObject({ title: 'Across the topology' });
  });

  it('follows the new master after the master crashes, without restarting the pods', async () => {
    const [podA, podB] = [service(sentinel.url), service(sentinel.url)];
    await Promise.all([podA.ready(15_000), podB.ready(15_000)]);
    expect(await deliver(podA, podB)).toBeDefined();

    const [oldMaster, replica] = sentinel.dataPorts;
    expect(await sentinel.masterPort()).toBe(oldMaster);
    expect(await sentinel.crashMaster()).toBe(replica);

    expect(await deliver(podA, podB, 15_000)).toMatchObject({ title: 'Across the topology' });
    // Every sentinel pod's connections (this test's and the one before's) now live on the promoted replica.
    const pods = opened.filter((pod) => pod.redisUrl === sentinel.url).length;
    // Idle connections (the previous test's pods) notice the crash on their own reconnect schedule, so
    // they may arrive after this test's delivery did: wait for them, bounded.
    const promoted = new Redis({ port: replica, host: '127.0.0.1', password: sentinel.password });
    try {
      const count = async (name: string) =>
        String(await promoted.client('LIST')).match(new RegExp(`name=${name} `, 'g'))?.length ?? 0;
      for (const deadline = Date.now() + 15_000; Date.now() < deadline; ) {
        if ((await count('herald-api-publish')) === pods && (await count('herald-api-subscribe')) === pods) break;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      expect(await count('herald-api-publish')).toBe(pods);
      expect(await count('herald-api-subscribe')).toBe(pods);
    } finally {
      promoted.disconnect();
    }
  }, 60_000);

  it('refuses to become ready when no sentinel answers', async () => {
    await expect(service('redis+sentinel://127.0.0.1:1/herald').ready(300)).rejects.toThrow(/REDIS_URL/);
  });
});

describe('REDIS_URL=redis+cluster://… (3-master Redis Cluster)', () => {
  it('delivers an event published on one pod to a subscriber on another', async () => {
    const [podA, podB] = [service(cluster.url), service(cluster.url)];
    await Promise.all([podA.ready(15_000), podB.ready(15_000)]);
    expect(await deliver(podA, podB)).toMatchObject({ title: 'Across the topology' });
  });

  it('discovers the cluster from a single startup node, a different one per pod', async () => {
    const [first, , third] = cluster.ports;
    const only = (port: number | undefined) =>
      `redis+cluster://:${encodeURIComponent(cluster.password)}@127.0.0.1:${port}`;
    const [podA, podB] = [service(only(first)), service(only(third))];
    await Promise.all([podA.ready(15_000), podB.ready(15_000)]);
    expect(await deliver(podA, podB)).toMatchObject({ title: 'Across the topology' });
    expect(await deliver(podB, podA)).toMatchObject({ title: 'Across the topology' });
  });

  it('uses sharded pub/sub: the channel is a shard channel of the node owning its slot, never a plain channel', async () => {
    const [podA, podB] = [service(cluster.url), service(cluster.url)];
    await Promise.all([podA.ready(15_000), podB.ready(15_000)]);
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
      for (const deadline = Date.now() + 15_000; !(await shardChannels()).flat().includes(channel); ) {
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
      for (const deadline = Date.now() + 15_000; !received && Date.now() < deadline; ) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(received).toMatchObject({ title: 'Across the topology' });
    } finally {
      stop();
      for (const node of nodes) node.disconnect();
    }
  });

  /** An organisation whose channel (and every key) lives on the master listening on `port`. */
  async function orgOnMaster(port: number): Promise<string> {
    const node = new Redis({ port, host: '127.0.0.1', password: cluster.password });
    try {
      const owned = (await node.cluster('SLOTS')).filter(([, , master]) => master?.[1] === port);
      for (let i = 0; ; i++) {
        const candidate = `org-restart-${i}-${randomUUID()}`;
        const slot = Number(await node.cluster('KEYSLOT', subscriptionRedisKeys(PREFIX, candidate).channel));
        if (owned.some(([start, end]) => start <= slot && slot <= end)) return candidate;
      }
    } finally {
      node.disconnect();
    }
  }

  async function until(what: string, check: () => boolean, timeoutMs = 15_000): Promise<void> {
    for (const deadline = Date.now() + timeoutMs; !check(); ) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  it('delivers again after a master is restarted, without restarting the pods', async () => {
    const [podA, podB] = [service(cluster.url), service(cluster.url)];
    await Promise.all([podA.ready(15_000), podB.ready(15_000)]);
    const restarted = cluster.ports[1]!;
    const orgId = await orgOnMaster(restarted);
    expect(await deliver(podA, podB, 15_000, orgId)).toMatchObject({ title: 'Across the topology' });
    await cluster.restartNode(restarted);
    expect(await deliver(podA, podB, 20_000, orgId)).toMatchObject({ title: 'Across the topology' });
    expect(await deliver(podA, podB, 20_000)).toMatchObject({ title: 'Across the topology' });
  }, 90_000);

  it('is not ready while the master owning a subscribed channel is down, and delivers once it is back', async () => {
    const [publisher, listener] = [service(cluster.url), service(cluster.url)];
    await Promise.all([publisher.ready(15_000), listener.ready(15_000)]);
    const restarted = cluster.ports[2]!;
    const orgId = await orgOnMaster(restarted);
    const titles: string[] = [];
    const stop = await listener.history.listen(orgId, (entry) => titles.push(entry.event.post.title));
    try {
      await publisher.publishPostPublished(post(orgId, 'before'));
      await until('the first event', () => titles.includes('before'));
      expect(listener.readiness()).toEqual({ ready: true });

      let publisherReadyWhileDown: boolean | undefined;
      await cluster.restartNode(restarted, async () => {
        await until('the listening pod to report not ready', () => !listener.readiness().ready, 10_000);
        // A pod that listens on no channel of that master has nothing to miss.
        publisherReadyWhileDown = publisher.readiness().ready;
      });
      expect(publisherReadyWhileDown).toBe(true);
      await until('the listening pod to be ready again', () => listener.readiness().ready);
      for (const deadline = Date.now() + 10_000; ; ) {
        const outcome = await publisher.publishPostPublished(post(orgId, 'after'));
        if (outcome.ok) break;
        if (Date.now() > deadline) throw outcome.error;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await until('the event published after the restart', () => titles.includes('after'));
      expect(titles).toEqual(['before', 'after']);
    } finally {
      stop();
    }
  }, 90_000);

  it('after a shard subscriber connection drops, delivers what was published before it re-subscribed, without a further event', async () => {
    const [publisher, listener] = [service(cluster.url), service(cluster.url)];
    await Promise.all([publisher.ready(15_000), listener.ready(15_000)]);
    const port = cluster.ports[0]!;
    const orgId = await orgOnMaster(port);
    const titles: string[] = [];
    const stop = await listener.history.listen(orgId, (entry) => titles.push(entry.event.post.title));
    try {
      await publisher.publishPostPublished(post(orgId, 'before'));
      await until('the first event', () => titles.includes('before'));
      // Drop the SSUBSCRIBE connections on that master from another process while this one's event loop is
      // blocked, then write the next event before the loop turns: the listener learns of the drop only
      // after the event went out with no subscriber there, so only a fill after re-subscribing delivers it.
      execFileSync(REDIS_CLI, [
        '-p',
        String(port),
        '-a',
        cluster.password,
        '--no-auth-warning',
        'CLIENT',
        'KILL',
        'TYPE',
        'pubsub',
      ]);
      const published = publisher.publishPostPublished(post(orgId, 'missed live'));
      expect((await published).ok).toBe(true);
      await until('the event published while the shard subscriber was away', () => titles.includes('missed live'));
      expect(titles).toEqual(['before', 'missed live']);
      expect(listener.readiness()).toEqual({ ready: true });
    } finally {
      stop();
    }
  }, 30_000);

  it('refuses to become ready when no node answers', async () => {
    await expect(service('redis+cluster://127.0.0.1:1').ready(300)).rejects.toThrow(/REDIS_URL/);
  });
});
