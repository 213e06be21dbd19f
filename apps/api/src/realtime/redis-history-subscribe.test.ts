import { randomUUID } from 'node:crypto';
import { createRedisClient } from '@herald/config/redis';
import type { HistoryEntry } from '@herald/contracts';
import { type Logger, pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { testPostEvent } from '../testing/post-event.js';
import { SUBSCRIBER_OPTIONS } from './pubsub.js';
import { createRedisHistory } from './redis-history.js';

const silent = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const event = (orgId: string) => testPostEvent(orgId, randomUUID());

const admin = createRedisClient(inject('redisUrl'));
/** The test Redis's URL, signed in as `user` (created with `nopass`: any password). */
function asUser(user: string): string {
  const url = new URL(inject('redisUrl'));
  url.username = user;
  url.password = 'unused';
  return url.toString();
}
const users: string[] = [];
const clients: Array<{ quit(): Promise<unknown> }> = [admin];
afterAll(async () => {
  for (const user of users) await admin.call('ACL', 'DELUSER', user).catch(() => {});
  await Promise.all(clients.map((client) => client.quit().catch(() => {})));
});

/**
 * A history whose live channels' connection signs in as a new ACL user with `channels` (`resetchannels`:
 * none, `allchannels`: every one), on the API's own subscriber options; `logger` gets its warnings.
 */
async function historyAsUser(channels: 'resetchannels' | 'allchannels', logger: Logger) {
  const user = `herald-subscribe-test-${randomUUID()}`;
  users.push(user);
  await admin.call('ACL', 'SETUSER', user, 'on', 'nopass', '~*', channels, '+@all');
  const subscriber = createRedisClient(asUser(user), SUBSCRIBER_OPTIONS);
  subscriber.on('error', () => {});
  const commands = createRedisClient(inject('redisUrl'));
  clients.push(subscriber, commands);
  const prefix = `herald-subscribe-test:${randomUUID()}:`;
  const history = createRedisHistory({ commands, subscriber, prefix, limits: { size: 100, ttlMs: 60_000 }, logger });
  return { user, history };
}

describe('the Redis history when the server refuses a SUBSCRIBE', () => {
  it('fails that listen, and the next listen for the organisation subscribes again and hears its events', async () => {
    const orgId = `org-${randomUUID()}`;
    // A user that may run every command on every key but subscribe to no channel: the server answers
    // SUBSCRIBE with NOPERM while the connection stays up (no reconnect, no `ready` to retry on).
    const { user, history } = await historyAsUser('resetchannels', silent);
    await expect(history.listen(orgId, () => {})).rejects.toThrow(/NOPERM/);

    // The permission granted, the same connection may subscribe now.
    await admin.call('ACL', 'SETUSER', user, 'allchannels');
    const heard: HistoryEntry[] = [];
    const stop = await history.listen(orgId, (entry) => heard.push(entry));
    const [appended] = await history.append([event(orgId)]);
    expect(appended?.ok).toBe(true);
    for (let i = 0; i < 1000 && heard.length === 0; i++) await sleep(20);
    expect(heard.map((entry) => entry.event.eventId)).toEqual([
      appended?.ok ? appended.entry.event.eventId : 'not appended',
    ]);
    stop();
  }, 60_000);

  it('after a reconnect whose SUBSCRIBE is refused, the next listen subscribes again and every listener hears', async () => {
    const orgId = `org-${randomUUID()}`;
    const warnings: string[] = [];
    // The API's own subscriber options: a re-subscribe ioredis made by itself would end this process when
    // refused.
    const { user, history } = await historyAsUser(
      'allchannels',
      pino({ level: 'warn' }, { write: (line: string) => warnings.push(line) }),
    );
    const first: HistoryEntry[] = [];
    await history.listen(orgId, (entry) => first.push(entry));

    // The channels taken away: Redis drops the connection subscribed to one, ioredis reconnects, and the
    // feed's SUBSCRIBE after the reconnect is refused.
    await admin.call('ACL', 'SETUSER', user, 'resetchannels');
    for (let i = 0; i < 1000 && !warnings.some((line) => line.includes('re-subscribe failed')); i++) await sleep(20);
    expect(warnings.some((line) => line.includes('re-subscribe failed'))).toBe(true);

    await admin.call('ACL', 'SETUSER', user, 'allchannels');
    const second: HistoryEntry[] = [];
    await history.listen(orgId, (entry) => second.push(entry));
    const [appended] = await history.append([event(orgId)]);
    const eventId = appended?.ok ? appended.entry.event.eventId : 'not appended';
    for (let i = 0; i < 1000 && (first.length === 0 || second.length === 0); i++) await sleep(20);
    expect(second.map((entry) => entry.event.eventId)).toEqual([eventId]);
    expect(first.map((entry) => entry.event.eventId)).toEqual([eventId]);
  }, 60_000);
});
