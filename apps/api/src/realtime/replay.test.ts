import { randomUUID } from 'node:crypto';
import type { HistoryEntry } from '@herald/contracts';
import type { Post } from '@herald/db';
import { freePort } from '@herald/testing/ports';
import { createClient } from 'graphql-ws';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { WebSocket } from 'ws';
import { type OwnRedis, ownRedis } from '../../../../test/support/redis-server.js';
import { createApiMetrics } from '../metrics.js';
import { startTestApi } from '../testing/test-api.js';
import { decodeCursor, encodeCursor } from './cursor.js';
import type { SubscriptionHistory } from './history.js';
import { openPostPublishedStream, type StreamedEntry } from './post-published-stream.js';
import { createPubSubService, type PubSubService } from './pubsub.js';
import { createReplayReads } from './replay-reads.js';

// Replaying a long history against real Redis: page by page, a bounded number of reads at
// a time, shared between subscribers resuming from the same place, and a coded, retryable error
// (HISTORY_UNAVAILABLE) when Redis stops answering — before or during the replay.

const logger = pino({ level: 'silent' });
const opened: Array<{ close(): Promise<unknown> }> = [];
afterAll(async () => {
  for (const service of opened.reverse()) await service.close();
});

const post = (orgId: string, title: string): Post => ({
  id: randomUUID(),
  seq: '1',
  org_id: orgId,
  author_id: 'u1',
  title,
  tags: [],
  status: 'PUBLISHED',
  created_at: new Date('2026-11-23T07:00:00Z'),
  published_at: new Date('2026-11-23T07:30:00Z'),
});

async function pod(redisUrl: string, replayConcurrency = 4, prefix = `herald-replay-${randomUUID()}:`) {
  const service = createPubSubService({
    redisUrl,
    redisPrefix: prefix,
    limits: { size: 2_000, ttlMs: 600_000 },
    replayConcurrency,
    logger,
    metrics: createApiMetrics(),
  });
  opened.push(service);
  await service.ready(5_000);
  return service;
}

/** Appends `count` events to `orgId`'s history; returns their entries. */
async function publish(service: PubSubService, orgId: string, count: number, from = 1): Promise<HistoryEntry[]> {
  const entries: HistoryEntry[] = [];
  for (let i = from; i < from + count; i++) {
    const outcome = await service.publishPostPublished(post(orgId, `event ${i}`));
    if (!outcome.ok) throw outcome.error;
    entries.push(outcome.entry);
  }
  return entries;
}

/**
 * Takes entries from `stream` until `count` were taken (or none came for 15 s: what was taken is
 * returned, for the assertion to show); yields to the event loop between them.
 */
async function take(stream: AsyncIterator<StreamedEntry>, count: number): Promise<StreamedEntry[]> {
  const taken: StreamedEntry[] = [];
  while (taken.length < count) {
    let timer: NodeJS.Timeout | undefined;
    const stalled = new Promise<'stalled'>((resolve) => {
      timer = setTimeout(() => resolve('stalled'), 15_000);
    });
    const next = await Promise.race([stream.next(), stalled]);
    clearTimeout(timer);
    if (next === 'stalled' || next.done) break;
    taken.push(next.value);
    await new Promise((resolve) => setImmediate(resolve));
  }
  return taken;
}

const cursorOf = (orgId: string, entry: HistoryEntry) =>
  encodeCursor({ orgId, epoch: entry.epoch, position: entry.position });

describe('replaying in pages', () => {
  it('delivers a replay of many pages complete and in order, then live: no gap or repeat at the switch while appends go on', async () => {
    const service = await pod(inject('redisUrl'));
    const orgId = `org-${randomUUID()}`;
    const before = await publish(service, orgId, 60);
    // Pages of 7 and at most 5 live entries held while replaying: the appends running during the
    // replay overflow what is held, so the replay has to read on past what it dropped.
    const stream = await openPostPublishedStream(service, orgId, cursorOf(orgId, before[2]!), {
      pageSize: 7,
      maxBuffered: 5,
    });
    const appending = publish(service, orgId, 40, 61);
    const received = await take(stream, 97);
    await appending;
    await publish(service, orgId, 1, 101);
    received.push(...(await take(stream, 1)));
    await stream.return?.();

    expect(received.map(({ entry }) => entry.position)).toEqual(Array.from({ length: 98 }, (_, i) => i + 4));
    expect(received.map(({ entry }) => entry.event.post.title)).toEqual(
      Array.from({ length: 98 }, (_, i) => `event ${i + 4}`),
    );
    // The 57 events published before the subscribe came from the history, the last one live.
    expect(received.slice(0, 57).every(({ replayed }) => replayed)).toBe(true);
    expect(received.at(-1)?.replayed).toBe(false);
  });

  it('reads on past live events it could not hold that came in during its last read: no gap', async () => {
    const service = await pod(inject('redisUrl'));
    const orgId = `org-${randomUUID()}`;
    const entries = await publish(service, orgId, 15);
    const seen: HistoryEntry[] = [];
    const stopSeeing = await service.history.listen(orgId, (entry) => seen.push(entry));
    let appended = false;
    // The history's last page is read, then — before its reply is handled — 20 events are appended
    // and reach the live listener: more than the stream holds (5), so it drops the oldest of them.
    const history: SubscriptionHistory = {
      ...service.history,
      readAfter: async (...args) => {
        const page = await service.history.readAfter(...args);
        if (page.length < (args[3] ?? Number.POSITIVE_INFINITY) && !appended) {
          appended = true;
          await publish(service, orgId, 20, 16);
          while (seen.length < 20) await new Promise((resolve) => setTimeout(resolve, 5));
        }
        return page;
      },
    };
    const source = { history: service.history, replay: createReplayReads(history, { concurrency: 1, logger }) };
    // From position 5: one full page (6–15), then an empty one, during which the 20 come in.
    const stream = await openPostPublishedStream(source, orgId, cursorOf(orgId, entries[4]!), {
      pageSize: 10,
      maxBuffered: 5,
    });
    const received = await take(stream, 30);
    await stream.return?.();
    stopSeeing();
    expect(appended).toBe(true);
    expect(received.map(({ entry }) => entry.position)).toEqual(Array.from({ length: 30 }, (_, i) => i + 6));
  });

  it('reads one page at a time as the subscriber takes events, never the whole history at once', async () => {
    const service = await pod(inject('redisUrl'));
    const orgId = `org-${randomUUID()}`;
    const entries = await publish(service, orgId, 30);
    const sizes: number[] = [];
    const history: SubscriptionHistory = {
      ...service.history,
      readAfter: async (...args) => {
        const page = await service.history.readAfter(...args);
        sizes.push(page.length);
        return page;
      },
    };
    const source = { history: service.history, replay: createReplayReads(history, { concurrency: 1, logger }) };
    const stream = await openPostPublishedStream(source, orgId, cursorOf(orgId, entries[0]!), { pageSize: 10 });
    expect(sizes).toEqual([10]);
    await take(stream, 10);
    expect(sizes).toEqual([10]);
    await take(stream, 19);
    expect(sizes).toEqual([10, 10, 9]);
    await stream.return?.();
  });
});

describe('a long replay shares the event loop', () => {
  it('lets other work run between replayed events instead of executing a whole page in one go', async () => {
    const memory = createPubSubService({ redisUrl: undefined, logger, metrics: createApiMetrics() });
    opened.push(memory);
    const orgId = `org-${randomUUID()}`;
    const entries = await publish(memory, orgId, 300);
    const stream = await openPostPublishedStream(memory, orgId, cursorOf(orgId, entries[0]!));
    let consumed = 0;
    let consumedWhenOtherWorkRan: number | undefined;
    setImmediate(() => {
      consumedWhenOtherWorkRan = consumed;
    });
    // A consumer that never waits on anything but the stream, like a graphql-ws subscription loop.
    while (consumed < 299) {
      const { done } = await stream.next();
      if (done) break;
      consumed += 1;
    }
    await stream.return?.();
    expect(consumed).toBe(299);
    expect(consumedWhenOtherWorkRan).toBeLessThan(10);
  });
});

describe('the head of a history', () => {
  for (const kind of ['memory', 'redis'] as const) {
    it(`${kind}: starts a history for an organisation without one, and every later event comes after it`, async () => {
      const service =
        kind === 'redis'
          ? await pod(inject('redisUrl'))
          : createPubSubService({ redisUrl: undefined, logger, metrics: createApiMetrics() });
      if (kind === 'memory') opened.push(service);
      const orgId = `org-${randomUUID()}`;
      const head = await service.history.head(orgId);
      expect(head.position).toBe(0);
      const [first, second] = await publish(service, orgId, 2);
      expect(first?.epoch).toBe(head.epoch);
      expect((await service.history.readAfter(orgId, head.epoch, head.position)).map((e) => e.position)).toEqual([
        1, 2,
      ]);
      expect(await service.history.head(orgId)).toEqual({ epoch: second?.epoch, position: 2 });
    });
  }
});

describe('many replays at once', () => {
  it('all complete, with never more reads running than the concurrency bound', async () => {
    const service = await pod(inject('redisUrl'));
    const orgId = `org-${randomUUID()}`;
    const entries = await publish(service, orgId, 120);
    let running = 0;
    let peak = 0;
    let reads = 0;
    let sawQueue = false;
    const history: SubscriptionHistory = {
      ...service.history,
      readAfter: async (...args) => {
        reads += 1;
        running += 1;
        if (replay.waiting > 0) sawQueue = true;
        peak = Math.max(peak, running);
        try {
          return await service.history.readAfter(...args);
        } finally {
          running -= 1;
        }
      },
    };
    const replay = createReplayReads(history, { concurrency: 2, logger });
    const source = { history: service.history, replay };
    // 60 subscribers from 30 different places (two from each), all at once.
    const starts = Array.from({ length: 60 }, (_, i) => (i % 30) * 3);
    const results = await Promise.all(
      starts.map(async (start) => {
        const stream = await openPostPublishedStream(source, orgId, cursorOf(orgId, entries[start]!), {
          pageSize: 20,
        });
        const taken = await take(stream, 119 - start);
        await stream.return?.();
        return { start, positions: taken.map(({ entry }) => entry.position) };
      }),
    );
    for (const { start, positions } of results)
      expect(positions).toEqual(Array.from({ length: 119 - start }, (_, i) => start + 2 + i));
    expect(peak).toBe(2);
    expect(sawQueue).toBe(true);
    // Subscribers resuming from the same place shared their reads: fewer than one read per stream and
    // page (a stream of n entries reads its full pages and one short one).
    const unshared = starts.reduce((sum, start) => sum + Math.floor((119 - start) / 20) + 1, 0);
    expect(reads).toBeLessThan(unshared);
  });
});

describe('Redis unavailable while resuming', () => {
  let redis: OwnRedis;
  let admin: Redis;
  let service: PubSubService;

  beforeAll(async () => {
    redis = await ownRedis(await freePort());
    await redis.start();
    admin = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  });
  afterAll(async () => {
    admin?.disconnect();
    await redis?.cleanup();
  });

  it('a replay whose Redis stops between pages ends with HISTORY_UNAVAILABLE, never a normal end', async () => {
    service = await pod(redis.url);
    const orgId = `org-${randomUUID()}`;
    const entries = await publish(service, orgId, 50);
    const stream = await openPostPublishedStream(service, orgId, cursorOf(orgId, entries[0]!), { pageSize: 10 });
    expect((await take(stream, 10)).map(({ entry }) => entry.position)).toEqual(
      Array.from({ length: 10 }, (_, i) => i + 2),
    );
    await redis.kill();
    await expect(stream.next()).rejects.toMatchObject({ extensions: { code: 'HISTORY_UNAVAILABLE' } });
    // Ended: nothing more, and its live listener is gone.
    expect(await stream.next()).toEqual({ done: true, value: undefined });
  });

  it('a resume while Redis is stopped is refused with HISTORY_UNAVAILABLE before any stream exists', async () => {
    await redis.start();
    const orgId = `org-${randomUUID()}`;
    await new Promise((resolve) => setTimeout(resolve, 50));
    const fresh = await pod(redis.url);
    const [entry] = await publish(fresh, orgId, 2);
    // A live subscriber keeps the organisation's channel subscribed, as on a busy pod.
    const live = await openPostPublishedStream(fresh, orgId, undefined);
    await redis.kill();
    await expect(openPostPublishedStream(fresh, orgId, cursorOf(orgId, entry!))).rejects.toMatchObject({
      extensions: { code: 'HISTORY_UNAVAILABLE' },
    });
    await live.return?.();
  });

  it('over graphql-ws: a replay cut short by Redis stopping ends with an error message HISTORY_UNAVAILABLE after what it had, never complete', async () => {
    await redis.start();
    const api = await startTestApi({
      databaseUrl: inject('databaseUrl'),
      listen: true,
      env: { REDIS_URL: redis.url, HERALD_REDIS_PREFIX: `herald-replay-${randomUUID()}:` },
    });
    opened.push(api);
    const orgId = `org-${randomUUID()}`;
    const token = await api.token({ sub: 'reader', name: 'Reader', orgs: [orgId] });
    const entries = await publish(api.app.pubsub, orgId, 1_000);
    const positions: number[] = [];
    const errors: Array<{ extensions?: { code?: string } }> = [];
    let completed = false;
    let killed: Promise<void> | undefined;
    const client = createClient({
      url: `${api.baseUrl!.replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authToken: token },
      retryAttempts: 0,
    });
    opened.push({ close: async () => client.dispose() });
    client.subscribe(
      {
        query: 'subscription($orgId: ID!, $after: String) { postPublished(orgId: $orgId, after: $after) { title } }',
        variables: { orgId, after: cursorOf(orgId, entries[0]!) },
      },
      {
        next: (result) => {
          const cursor = (result.extensions as { cursor?: string } | undefined)?.cursor ?? '';
          positions.push(decodeCursor(cursor, orgId).position);
          // Redis goes away while the server is still delivering the first page.
          killed ??= redis.kill();
        },
        error: (error) => errors.push(...(error as typeof errors)),
        complete: () => {
          completed = true;
        },
      },
    );
    const deadline = Date.now() + 20_000;
    while (errors.length === 0 && !completed && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 20));
    await killed;
    expect(errors.map((error) => error.extensions?.code)).toEqual(['HISTORY_UNAVAILABLE']);
    expect(completed).toBe(false);
    // What came before the error is the start of the replay, in order.
    expect(positions.length).toBeGreaterThan(0);
    expect(positions.length).toBeLessThan(999);
    expect(positions).toEqual(Array.from({ length: positions.length }, (_, i) => i + 2));
  }, 60_000);

  it('a history read that hangs (Redis paused: CLIENT PAUSE) ends with HISTORY_UNAVAILABLE after the command timeout', async () => {
    await redis.start();
    const orgId = `org-${randomUUID()}`;
    const fresh = await pod(redis.url);
    const [entry] = await publish(fresh, orgId, 3);
    const live = await openPostPublishedStream(fresh, orgId, undefined);
    await admin.connect().catch(() => {});
    // Redis answers no other client for 7 s (DEBUG SLEEP is off by default since Redis 7); the read
    // times out after 5 s.
    await admin.call('CLIENT', 'PAUSE', '7000', 'ALL');
    await expect(openPostPublishedStream(fresh, orgId, cursorOf(orgId, entry!))).rejects.toMatchObject({
      extensions: { code: 'HISTORY_UNAVAILABLE' },
    });
    await live.return?.();
  }, 30_000);
});
