import { randomUUID } from 'node:crypto';
import { type HistoryEntry, subscriptionRedisKeys, webhookRedisKeys } from '@herald/contracts';
import type { Post } from '@herald/db';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createApiMetrics } from '../metrics.js';
import type { HistoryLimits } from './history.js';
import { createPubSubService, type PubSubService } from './pubsub.js';

const post = (orgId: string, title = 'On the wire'): Post => ({
  id: randomUUID(),
  seq: '7',
  org_id: orgId,
  author_id: 'u1',
  title,
  tags: ['a'],
  status: 'PUBLISHED',
  created_at: new Date('2026-11-21T07:00:00Z'),
  published_at: new Date('2026-11-21T07:30:00Z'),
});

const opened: Array<{ close(): Promise<unknown> }> = [];
afterAll(async () => {
  await Promise.all(opened.map((service) => service.close()));
});

function service(redisUrl?: string, prefix = `herald-test-${randomUUID()}:`, limits?: HistoryLimits): PubSubService {
  const created = createPubSubService({
    redisUrl,
    redisPrefix: prefix,
    limits,
    logger: pino({ level: 'silent' }),
    metrics: createApiMetrics(),
  });
  opened.push(created);
  return created;
}

/** Collects the live entries of `orgId` on `pod`. */
async function listen(pod: PubSubService, orgId: string): Promise<HistoryEntry[]> {
  const received: HistoryEntry[] = [];
  opened.push({ close: async () => stop() });
  const stop = await pod.history.listen(orgId, (entry) => received.push(entry));
  return received;
}

describe('Redis history and live channel', () => {
  it('publishes each entry on <prefix>post-published:{<orgId>} as JSON, with its position, readable by any Redis client', async () => {
    const orgId = `org-${randomUUID()}`;
    const prefix = `herald-test-${randomUUID()}:`;
    const listener = new Redis(inject('redisUrl'));
    opened.push({ close: () => listener.quit() });
    const received = new Promise<{ channel: string; message: string }>((resolve) =>
      listener.on('message', (channel, message) => resolve({ channel, message })),
    );
    await listener.subscribe(subscriptionRedisKeys(prefix, orgId).channel);
    const pod = service(inject('redisUrl'), prefix);
    await pod.ready(5_000);
    expect((await pod.publishPostPublished(post(orgId))).ok).toBe(true);
    const { channel, message } = await received;
    expect(channel).toBe(`${prefix}post-published:{${orgId}}`);
    expect(JSON.parse(message)).toMatchObject({
      position: 1,
      epoch: expect.any(String),
      event: { v: 1, orgId, post: { orgId, title: 'On the wire', publishedAt: '2026-11-21T07:30:00.000Z', seq: '7' } },
    });
  });

  it('delivers an event appended on one pod to a listener on another, in position order', async () => {
    const orgId = `org-${randomUUID()}`;
    const prefix = `herald-test-${randomUUID()}:`;
    const [podA, podB] = [service(inject('redisUrl'), prefix), service(inject('redisUrl'), prefix)];
    await Promise.all([podA.ready(5_000), podB.ready(5_000)]);
    const received = await listen(podB, orgId);
    for (let i = 1; i <= 5; i++) await podA.publishPostPublished(post(orgId, `post ${i}`));
    await expect.poll(() => received.length, { timeout: 30_000 }).toBe(5);
    expect(received.map((entry) => [entry.position, entry.event.post.title])).toEqual([
      [1, 'post 1'],
      [2, 'post 2'],
      [3, 'post 3'],
      [4, 'post 4'],
      [5, 'post 5'],
    ]);
  });

  it('stores an event id once: appending it again returns the first entry and publishes nothing', async () => {
    const orgId = `org-${randomUUID()}`;
    const pod = service(inject('redisUrl'));
    await pod.ready(5_000);
    const received = await listen(pod, orgId);
    const first = await pod.publishPostPublished(post(orgId, 'once'), 'evt_same');
    const again = await pod.publishPostPublished(post(orgId, 'twice'), 'evt_same');
    await pod.publishPostPublished(post(orgId, 'next'));
    await expect.poll(() => received.length, { timeout: 30_000 }).toBe(2);
    expect(first.ok && again.ok && again.entry).toEqual(first.ok && first.entry);
    expect(received.map((entry) => entry.event.post.title)).toEqual(['once', 'next']);
  });

  it('reads the history after a position; refuses trimmed, future and other-epoch positions', async () => {
    const orgId = `org-${randomUUID()}`;
    const prefix = `herald-test-${randomUUID()}:`;
    const pod = service(inject('redisUrl'), prefix, { size: 3, ttlMs: 60_000 });
    await pod.ready(5_000);
    const entries: HistoryEntry[] = [];
    for (let i = 1; i <= 5; i++) {
      const outcome = await pod.publishPostPublished(post(orgId, `post ${i}`));
      if (outcome.ok) entries.push(outcome.entry);
    }
    const epoch = entries[0]!.epoch;
    expect((await pod.history.readAfter(orgId, epoch, 2)).map((entry) => entry.position)).toEqual([3, 4, 5]);
    expect(await pod.history.readAfter(orgId, epoch, 5)).toEqual([]);
    await expect(pod.history.readAfter(orgId, epoch, 1)).rejects.toMatchObject({
      extensions: { code: 'CURSOR_EXPIRED' },
    });
    await expect(pod.history.readAfter(orgId, epoch, 6)).rejects.toMatchObject({
      extensions: { code: 'CURSOR_EXPIRED' },
    });
    await expect(pod.history.readAfter(orgId, 'other', 3)).rejects.toMatchObject({
      extensions: { code: 'CURSOR_EXPIRED' },
    });
    // The history is lost (this test's keys only): the next event starts a new epoch at position 1.
    const keys = subscriptionRedisKeys(prefix, orgId);
    const admin = new Redis(inject('redisUrl'));
    opened.push({ close: () => admin.quit() });
    expect(await admin.pttl(keys.history)).toBeGreaterThan(0);
    await admin.del(keys.history, keys.meta, keys.ids);
    const after = await pod.publishPostPublished(post(orgId, 'after the flush'));
    expect(after.ok && after.entry.position).toBe(1);
    expect(after.ok && after.entry.epoch).not.toBe(epoch);
    await expect(pod.history.readAfter(orgId, epoch, 4)).rejects.toMatchObject({
      extensions: { code: 'CURSOR_EXPIRED' },
    });
  });

  it('wakes the webhook dispatchers on the outbox wake-up channel after a commit whose fan-out is due (publishPost sends no NOTIFY with Redis)', async () => {
    const prefix = `herald-test-${randomUUID()}:`;
    const listener = new Redis(inject('redisUrl'));
    opened.push({ close: () => listener.quit() });
    const woken: string[] = [];
    listener.on('message', (channel: string) => woken.push(channel));
    await listener.subscribe(webhookRedisKeys(prefix).outboxWakeChannel);
    const pod = service(inject('redisUrl'), prefix);
    await pod.ready(5_000);
    expect(pod.wakesWebhookDispatchers).toBe(true);
    // No endpoint selects the event (recorded already dispatched): nobody is woken.
    await pod.published({ post: post('org-wake'), eventId: 'evt_nothing_due', handedToRelay: false, fanOutDue: false });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(woken).toEqual([]);
    await pod.published({ post: post('org-wake'), eventId: 'evt_wake', handedToRelay: false, fanOutDue: true });
    const deadline = Date.now() + 5_000;
    while (woken.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(woken).toEqual([webhookRedisKeys(prefix).outboxWakeChannel]);
  });

  it('refuses to become ready when Redis is unreachable', async () => {
    const unreachable = service('redis://127.0.0.1:1');
    await expect(unreachable.ready(300)).rejects.toThrow(/REDIS_URL/);
  });

  it('an append while Redis is unreachable fails fast with an error, and is counted', async () => {
    const metrics = createApiMetrics();
    const down = createPubSubService({ redisUrl: 'redis://127.0.0.1:1', logger: pino({ level: 'silent' }), metrics });
    opened.push(down);
    const outcome = await down.publishPostPublished(post('org-x'));
    expect(outcome.ok).toBe(false);
    expect((await metrics.deliveryErrors.get()).values[0]?.value).toBe(1);
  });
});

describe('in-memory history', () => {
  it('delivers within the process and replays after a position', async () => {
    const memory = service();
    const received = await listen(memory, 'org-m');
    await memory.publishPostPublished(post('org-m', 'one'));
    await memory.publishPostPublished(post('org-m', 'two'));
    expect(received.map((entry) => [entry.position, entry.event.post.title])).toEqual([
      [1, 'one'],
      [2, 'two'],
    ]);
    const replay = await memory.history.readAfter('org-m', received[0]!.epoch, 1);
    expect(replay.map((entry) => entry.event.post.title)).toEqual(['two']);
  });

  it('keeps at most SUBSCRIPTION_HISTORY_SIZE events and forgets them after SUBSCRIPTION_HISTORY_TTL', async () => {
    const memory = service(undefined, undefined, { size: 2, ttlMs: 50 });
    const first = await memory.publishPostPublished(post('org-t', 'one'));
    await memory.publishPostPublished(post('org-t', 'two'));
    await memory.publishPostPublished(post('org-t', 'three'));
    const epoch = first.ok ? first.entry.epoch : '';
    await expect(memory.history.readAfter('org-t', epoch, 0)).rejects.toMatchObject({
      extensions: { code: 'CURSOR_EXPIRED' },
    });
    expect((await memory.history.readAfter('org-t', epoch, 1)).length).toBe(2);
    await new Promise((resolve) => setTimeout(resolve, 80));
    await expect(memory.history.readAfter('org-t', epoch, 3)).rejects.toMatchObject({
      extensions: { code: 'CURSOR_EXPIRED' },
    });
  });
});
