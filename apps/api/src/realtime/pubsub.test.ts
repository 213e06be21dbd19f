import { randomUUID } from 'node:crypto';
import { DEFAULT_REDIS_PREFIX, postPublishedChannel, redisChannel } from '@herald/contracts';
import type { Post } from '@herald/db';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createApiMetrics } from '../metrics.js';
import { createPubSubService, POST_PUBLISHED_TOPIC, type PubSubService } from './pubsub.js';

const post = (orgId: string): Post => ({
  id: randomUUID(),
  seq: '7',
  org_id: orgId,
  author_id: 'u1',
  title: 'On the wire',
  tags: ['a'],
  status: 'PUBLISHED',
  created_at: new Date('2026-11-21T07:00:00Z'),
  published_at: new Date('2026-11-21T07:30:00Z'),
});

const opened: Array<{ close(): Promise<unknown> }> = [];
afterAll(async () => {
  await Promise.all(opened.map((service) => service.close()));
});

function service(redisUrl?: string): PubSubService {
  const created = createPubSubService({ redisUrl, logger: pino({ level: 'silent' }), metrics: createApiMetrics() });
  opened.push(created);
  return created;
}

describe('Redis pub/sub', () => {
  it('publishes on the channel herald:post-published:<orgId> as JSON, readable by any Redis client', async () => {
    const orgId = `org-${randomUUID()}`;
    const listener = new Redis(inject('redisUrl'));
    opened.push({ close: () => listener.quit() });
    const received = new Promise<{ channel: string; message: string }>((resolve) =>
      listener.on('message', (channel, message) => resolve({ channel, message })),
    );
    await listener.subscribe(redisChannel(DEFAULT_REDIS_PREFIX, postPublishedChannel(orgId)));
    const pod = service(inject('redisUrl'));
    await pod.ready(5_000);
    pod.publishPostPublished(post(orgId));
    const { channel, message } = await received;
    expect(channel).toBe(`herald:post-published:${orgId}`);
    expect(JSON.parse(message)).toMatchObject({
      org_id: orgId,
      title: 'On the wire',
      published_at: '2026-11-21T07:30:00.000Z',
      seq: '7',
    });
  });

  it('delivers an event published on one instance to a subscriber on another (two pods)', async () => {
    const orgId = `org-${randomUUID()}`;
    const [podA, podB] = [service(inject('redisUrl')), service(inject('redisUrl'))];
    const iterator = podB.pubsub.subscribe(POST_PUBLISHED_TOPIC, orgId)[Symbol.asyncIterator]();
    const first = iterator.next();
    // The subscribe command is asynchronous; publish until the subscriber has joined the channel.
    let event: IteratorResult<unknown> | undefined;
    for (let attempt = 0; attempt < 50 && !event; attempt++) {
      podA.publishPostPublished(post(orgId));
      event = await Promise.race([first, new Promise<undefined>((resolve) => setTimeout(resolve, 100))]);
    }
    expect(event?.value).toMatchObject({ org_id: orgId });
    await iterator.return?.();
  });

  it('refuses to become ready when Redis is unreachable', async () => {
    const unreachable = service('redis://127.0.0.1:1');
    await expect(unreachable.ready(300)).rejects.toThrow(/REDIS_URL/);
  });

  it('a publish while Redis is unreachable fails fast without throwing, and is counted', async () => {
    const metrics = createApiMetrics();
    const down = createPubSubService({ redisUrl: 'redis://127.0.0.1:1', logger: pino({ level: 'silent' }), metrics });
    opened.push(down);
    expect(() => down.publishPostPublished(post('org-x'))).not.toThrow();
    await expect
      .poll(async () => (await metrics.deliveryErrors.get()).values[0]?.value ?? 0, { timeout: 5_000 })
      .toBeGreaterThan(0);
  });
});

describe('in-memory pub/sub', () => {
  it('delivers within the process', async () => {
    const memory = service();
    const iterator = memory.pubsub.subscribe(POST_PUBLISHED_TOPIC, 'org-m')[Symbol.asyncIterator]();
    const next = iterator.next();
    memory.publishPostPublished(post('org-m'));
    expect((await next).value).toMatchObject({ org_id: 'org-m', title: 'On the wire' });
    await iterator.return?.();
  });
});
