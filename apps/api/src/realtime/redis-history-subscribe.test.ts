import { randomUUID } from 'node:crypto';
import { createRedisClient } from '@herald/config/redis';
import { type HistoryEntry, newEventId, type PostPublishedEventV1 } from '@herald/contracts';
import { pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createRedisHistory } from './redis-history.js';

const logger = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const event = (orgId: string): PostPublishedEventV1 =>
  ({
    v: 1,
    eventId: newEventId(),
    orgId,
    post: {
      id: `post-${randomUUID()}`,
      orgId,
      title: 'a post',
      tags: [],
      status: 'PUBLISHED',
      publishedAt: new Date().toISOString(),
      author: { id: 'u', name: 'U' },
    },
    emittedAt: Date.now(),
  }) as unknown as PostPublishedEventV1;

const admin = createRedisClient(inject('redisUrl'));
const user = `herald-subscribe-test-${randomUUID()}`;
const clients: Array<{ quit(): Promise<unknown> }> = [admin];
afterAll(async () => {
  await admin.call('ACL', 'DELUSER', user).catch(() => {});
  await Promise.all(clients.map((client) => client.quit().catch(() => {})));
});

describe('the Redis history when the server refuses a SUBSCRIBE', () => {
  it('fails that listen, and the next listen for the organisation subscribes again and hears its events', async () => {
    const prefix = `herald-subscribe-test:${randomUUID()}:`;
    const orgId = `org-${randomUUID()}`;
    // A user that may run every command on every key but subscribe to no channel: the server answers
    // SUBSCRIBE with NOPERM while the connection stays up (no reconnect, no `ready` to retry on).
    await admin.call('ACL', 'SETUSER', user, 'on', 'nopass', '~*', 'resetchannels', '+@all');
    const url = new URL(inject('redisUrl'));
    url.username = user;
    url.password = 'unused';
    const subscriber = createRedisClient(url.toString(), { maxRetriesPerRequest: null });
    const commands = createRedisClient(inject('redisUrl'));
    clients.push(subscriber, commands);
    const history = createRedisHistory({
      commands,
      subscriber,
      prefix,
      limits: { size: 100, ttlMs: 60_000 },
      logger,
    });
    await history.ready(10_000);

    await expect(history.listen(orgId, () => {})).rejects.toThrow(/NOPERM/);

    // The permission granted, the same connection may subscribe now.
    await admin.call('ACL', 'SETUSER', user, 'allchannels');
    const heard: HistoryEntry[] = [];
    const stop = await history.listen(orgId, (entry) => heard.push(entry));
    const [appended] = await history.append([event(orgId)]);
    expect(appended?.ok).toBe(true);
    for (let i = 0; i < 250 && heard.length === 0; i++) await sleep(20);
    expect(heard.map((entry) => entry.event.eventId)).toEqual([
      appended?.ok ? appended.entry.event.eventId : 'not appended',
    ]);
    stop();
  }, 30_000);
});
