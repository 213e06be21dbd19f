/**
 * Run as its own process by redis-history-fill.test.ts: a live entry arrives with a gap while the
 * history's command connection is down. The fill that follows fails at once (no offline queue), and
 * must be retried later, not in a loop of promise callbacks that never lets the event loop (and so
 * the reconnect) run. Prints `loop alive` once a timer fires during the outage, then the positions
 * delivered after the connection is back. A hang here is the bug; the test bounds it.
 */
import { randomUUID } from 'node:crypto';
import { createRedisClient } from '@herald/config/redis';
import { type HistoryEntry, subscriptionRedisKeys } from '@herald/contracts';
import { startCuttableProxy } from '@herald/testing/cuttable-proxy';
import { pino } from 'pino';
import { createRedisHistory } from '../realtime/redis-history.js';
import { testPostEvent } from './post-event.js';

const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = `herald-fill-test:${randomUUID()}:`;
const orgId = `org-${randomUUID()}`;
const limits = { size: 100, ttlMs: 60_000 };
const logger = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
async function until(what: string, check: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await sleep(20);
  if (!check()) throw new Error(`timed out waiting for ${what}`);
}
const event = (n: number) => testPostEvent(orgId, n);

const proxy = await startCuttableProxy(new URL(redisUrl));
const fastFail = { lazyConnect: false, enableOfflineQueue: false, maxRetriesPerRequest: 1 } as const;
const writer = createRedisHistory({
  commands: createRedisClient(redisUrl, fastFail),
  subscriber: createRedisClient(redisUrl, { maxRetriesPerRequest: null }),
  prefix,
  limits,
  logger,
});
const commands = createRedisClient(`redis://127.0.0.1:${proxy.port}`, { ...fastFail, retryStrategy: () => 50 });
commands.on('error', () => {});
const history = createRedisHistory({
  commands,
  subscriber: createRedisClient(redisUrl, { maxRetriesPerRequest: null }),
  prefix,
  limits,
  logger,
});
await Promise.all([writer.ready(10_000), history.ready(10_000)]);

const delivered: number[] = [];
let first: HistoryEntry | undefined;
await history.listen(orgId, (entry) => {
  first ??= entry;
  delivered.push(entry.position);
});
await writer.append([event(1), event(2), event(3)]);
await until('1, 2, 3 live', () => delivered.length === 3);

proxy.cut();
await until('the command connection lost', () => commands.status !== 'ready');
// Entry 5 arrives live while 4 was never seen: a gap, and the fill can't read the history.
const raw = createRedisClient(redisUrl);
await raw.publish(
  subscriptionRedisKeys(prefix, orgId).channel,
  JSON.stringify({ ...first!, position: 5, event: event(5) }),
);
await sleep(300);
process.stdout.write('loop alive\n');

// 4 and 5 reach the history; once the connection is back, the retried fill delivers them in order.
await writer.append([event(4), event(5)]);
proxy.restore();
await until('4 and 5 filled', () => delivered.length >= 5);
await sleep(200);
process.stdout.write(`delivered ${JSON.stringify(delivered)}\n`);
process.exit(0);
