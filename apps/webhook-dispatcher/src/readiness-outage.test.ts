import { randomUUID } from 'node:crypto';
import { createTestSchema, TEST_ENCRYPTION_KEYS, type TestSchema } from '@herald/testing';
import { type CuttableProxy, startCuttableProxy } from '@herald/testing/cuttable-proxy';
import {
  createDispatcherHarness,
  type DispatcherHarness,
  startTestReceiver,
  type TestReceiver,
} from '@herald/webhook-engine/testing';
import { pino } from 'pino';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { type DispatcherApp, startDispatcherApp } from './app.js';
import { loadDispatcherConfig } from './env.js';

// The dispatcher app's /readiness while the database or Redis is really gone: one app (real ops server,
// real PostgreSQL and Redis) whose connections to one of them go through a cuttable proxy, while the test
// (the "API pods") keeps its own direct connections to both.

/** One /readiness answer as a probe sees it; `no answer` when it did not come within PROBE_TIMEOUT_MS. */
interface Probe {
  /** Milliseconds since the cut (or the restore). */
  atMs: number;
  status: number | 'no answer';
  body?: unknown;
}

/** Kubernetes gives up on a probe after 2 s (k8s/base/webhook-dispatcher-deployment.yaml). */
const PROBE_TIMEOUT_MS = 2_000;
/** How long the outage may take to show on /readiness, the return after the restore, a delivery. */
const SHOWS_WITHIN_MS = 30_000;

interface World {
  app: DispatcherApp;
  proxy: CuttableProxy;
  harness: DispatcherHarness;
  receiver: TestReceiver;
  base: string;
  /** Starts another app with the same configuration (stopped at the end of the test). */
  startAnother(): Promise<DispatcherApp>;
}

let cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  // Last made, first closed: the app (its pool and clients) before the proxy it talks through.
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  cleanups = [];
});

/** The app with its PostgreSQL or its Redis behind a proxy; a harness and a receiver beside it, direct. */
async function startWorld(behind: 'postgres' | 'redis'): Promise<World> {
  const databaseUrl = inject('databaseUrl');
  const redisUrl = inject('redisUrl');
  const schema: TestSchema = await createTestSchema(databaseUrl);
  const proxy = await startCuttableProxy(
    new URL(behind === 'postgres' ? databaseUrl : redisUrl),
    behind === 'postgres' ? 5432 : 6379,
  );
  cleanups.push(() => proxy.close());
  const receiver = await startTestReceiver();
  cleanups.push(() => receiver.close());
  const config = loadDispatcherConfig({
    DATABASE_URL: behind === 'postgres' ? throughProxy(schema.url, proxy) : schema.url,
    REDIS_URL: behind === 'redis' ? throughProxy(redisUrl, proxy) : redisUrl,
    HERALD_REDIS_PREFIX: `herald-readiness-outage-test:${randomUUID()}:`,
    HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
    HOST: '127.0.0.1',
    PORT: '0',
    WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
    WEBHOOK_POLL_INTERVAL_MS: '100',
    WEBHOOK_TIMEOUT_MS: '2000',
    WEBHOOK_RETRY_BASE_MS: '100',
  });
  const app = await startDispatcherApp(config, pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }));
  cleanups.push(() => app.stop());
  // Before the app stops: a dispatcher stopping while Redis is away waits on its queued commands.
  cleanups.push(async () => proxy.restore());
  // Migrated by the app already; the harness only writes endpoints and outbox events, directly.
  const harness = await createDispatcherHarness(databaseUrl, redisUrl, schema);
  cleanups.push(() => harness.close());
  const startAnother = async () => {
    const another = await startDispatcherApp(config, pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }));
    cleanups.push(() => another.stop());
    return another;
  };
  return { app, proxy, harness, receiver, base: `http://127.0.0.1:${app.address.port}`, startAnother };
}

/** `url` with its host and port replaced by the proxy's (credentials, database and options kept). */
function throughProxy(url: string, proxy: CuttableProxy): string {
  const proxied = new URL(url);
  proxied.hostname = '127.0.0.1';
  proxied.port = String(proxy.port);
  return proxied.toString();
}

async function probe(base: string, since: number, timeoutMs = PROBE_TIMEOUT_MS): Promise<Probe> {
  try {
    const response = await fetch(`${base}/readiness`, { signal: AbortSignal.timeout(timeoutMs) });
    return { atMs: Math.round(performance.now() - since), status: response.status, body: await response.json() };
  } catch {
    return { atMs: Math.round(performance.now() - since), status: 'no answer' };
  }
}

/**
 * Probes /readiness every 100 ms until `wanted` holds for an answer or `withinMs` have passed (each
 * probe gives up after `probeTimeoutMs`).
 * @returns every answer seen (the last one is the wanted one, if it came)
 */
async function probeUntil(
  base: string,
  wanted: (probe: Probe) => boolean,
  withinMs: number,
  probeTimeoutMs = PROBE_TIMEOUT_MS,
): Promise<Probe[]> {
  const since = performance.now();
  const seen: Probe[] = [];
  while (performance.now() - since < withinMs) {
    const answer = await probe(base, since, probeTimeoutMs);
    seen.push(answer);
    if (wanted(answer)) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return seen;
}

/** The answers in `seen`, consecutive repeats collapsed: what failure messages show. */
function timeline(seen: Probe[]): string {
  const lines: string[] = [];
  let last = '';
  for (const { atMs, status, body } of seen) {
    const what = `${status}${body === undefined ? '' : ` ${JSON.stringify(body)}`}`;
    if (what !== last) lines.push(`${atMs} ms: ${what}`);
    last = what;
  }
  return lines.join('\n');
}

const isReady = (answer: Probe) => answer.status === 200;
const notReadyBecause = (reason: string) => (answer: Probe) =>
  answer.status === 503 &&
  JSON.stringify(answer.body) === JSON.stringify({ status: 'not ready', reason, part: 'dispatcher' });

async function delivered(world: World, path: string, eventId: string, withinMs: number): Promise<boolean> {
  return world.receiver
    .waitFor(() => world.receiver.requestsTo(path).some((request) => JSON.parse(request.body).id === eventId), withinMs)
    .then(
      () => true,
      () => false,
    );
}

/**
 * Long enough for the relay's five failed passes (100 + 200 + 400 + 800 ms of back-off) to count: the
 * stores are asked before the loops, so the answer goes on naming the cause, not `outbox relay failing`.
 * After the restore it may stay 503 for the loops (`outbox relay failing`, `scheduler failing`) until
 * each one's back-off ends and a pass succeeds.
 */
const AWAY_HOLD_MS = 3_000;
/** A stop while Redis is away: its queue ping's second, then the parts' own stops (no POST in flight). */
const STOPS_WITHIN_MS = 15_000;

describe('the dispatcher app /readiness during a real outage', () => {
  it('answers 503 "database unreachable" once PostgreSQL is cut, then 200 again by itself; nothing is lost', async () => {
    const world = await startWorld('postgres');
    await world.harness.createEndpoint('org-pg-outage', world.receiver.url('/pg'));
    expect(await probe(world.base, performance.now())).toMatchObject({ status: 200, body: { status: 'ready' } });

    world.proxy.cut();
    // Published meanwhile by a process that still has the database (an API pod).
    const [during] = await world.harness.publish('org-pg-outage');
    const down = await probeUntil(world.base, notReadyBecause('database unreachable'), SHOWS_WITHIN_MS);
    expect(down.at(-1), timeline(down)).toMatchObject({
      status: 503,
      body: { status: 'not ready', reason: 'database unreachable', part: 'dispatcher' },
    });
    // Not ready for as long as it lasts, every answer within the probe's timeout and naming the cause.
    const held = await probeUntil(world.base, () => false, AWAY_HOLD_MS);
    expect(
      held.filter((answer) => !notReadyBecause('database unreachable')(answer)),
      timeline(held),
    ).toEqual([]);

    world.proxy.restore();
    const up = await probeUntil(world.base, isReady, SHOWS_WITHIN_MS);
    expect(up.at(-1), timeline(up)).toMatchObject({ status: 200, body: { status: 'ready' } });
    // Nothing lost: the event committed during the outage reaches its endpoint.
    expect(await delivered(world, '/pg', during!, SHOWS_WITHIN_MS)).toBe(true);
  }, 120_000);

  it('answers 503 "queue unreachable" once Redis is cut, then 200 again by itself; nothing is lost', async () => {
    const world = await startWorld('redis');
    await world.harness.createEndpoint('org-redis-outage', world.receiver.url('/redis'));
    expect(await probe(world.base, performance.now())).toMatchObject({ status: 200, body: { status: 'ready' } });

    world.proxy.cut();
    // Fanned out meanwhile (the database is there); its XADD cannot reach Redis.
    const [during] = await world.harness.publish('org-redis-outage');
    const down = await probeUntil(world.base, notReadyBecause('queue unreachable'), SHOWS_WITHIN_MS);
    expect(down.at(-1), timeline(down)).toMatchObject({
      status: 503,
      body: { status: 'not ready', reason: 'queue unreachable', part: 'dispatcher' },
    });
    expect(down.filter(isReady), timeline(down)).toEqual([]);
    // Every probe answered (a command sent to a Redis that is away would wait in the client's offline
    // queue for 10 s and more): 503 naming the cause, for as long as it lasts.
    const held = await probeUntil(world.base, () => false, AWAY_HOLD_MS);
    expect(
      held.filter((answer) => !notReadyBecause('queue unreachable')(answer)),
      timeline(held),
    ).toEqual([]);

    world.proxy.restore();
    const up = await probeUntil(world.base, isReady, SHOWS_WITHIN_MS);
    expect(up.at(-1), timeline(up)).toMatchObject({ status: 200, body: { status: 'ready' } });
    expect(await delivered(world, '/redis', during!, SHOWS_WITHIN_MS)).toBe(true);
  }, 120_000);

  it('stops within seconds while Redis is cut, and a dispatcher started once it is back delivers what was published meanwhile', async () => {
    const world = await startWorld('redis');
    await world.harness.createEndpoint('org-redis-stop', world.receiver.url('/stop'));
    world.proxy.cut();
    const [during] = await world.harness.publish('org-redis-stop');
    // The relay's pass has fanned the event out and waits to XADD it; the consumer waits on its read.
    await probeUntil(world.base, notReadyBecause('queue unreachable'), SHOWS_WITHIN_MS);
    // The commands waiting for Redis used to hold the stop 40 s and more (a pass's XADD, the blocked read).
    const stopped = await Promise.race([
      world.app.stop().then(() => 'stopped'),
      new Promise((resolve) => setTimeout(() => resolve('still stopping'), STOPS_WITHIN_MS)),
    ]);
    expect(stopped).toBe('stopped');

    world.proxy.restore();
    await world.startAnother();
    expect(await delivered(world, '/stop', during!, SHOWS_WITHIN_MS)).toBe(true);
  }, 120_000);
});
