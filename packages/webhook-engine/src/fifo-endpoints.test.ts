import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newEventId } from '@herald/contracts';
import {
  createDatabase,
  type Database,
  findWebhookFifoHead,
  insertOutboxEvent,
  insertWebhookEndpoint,
  migrateToLatest,
} from '@herald/db';
import { TEST_KEYRING } from '@herald/testing';
import { generateWebhookSecret } from '@herald/webhooks';
import { type Kysely, sql } from 'kysely';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { createEmbeddedDispatcher } from './embedded.js';
import { replayWebhookDelivery } from './lease-protocol/replay.js';
import { replayDeadLetters } from './lease-protocol.js';
import { dispatcherWorld } from './testing/dispatcher-world.js';
import { FAST_SETTINGS } from './testing/harness.js';
import { type ReceivedRequest, startTestReceiver } from './testing/test-receiver.js';
import { until } from './testing/until.js';

// FIFO endpoints (lease-protocol.ts, "FIFO endpoints") against real dispatchers, a real Redis stream,
// a real PostgreSQL schema (and PGlite) and a real HTTP receiver: the receiver sees an endpoint's
// events strictly in the order they were published, a failing head holds the rest, and nothing else
// of the organisation waits for it.

const world = dispatcherWorld(startTestReceiver);

const eventIdOf = (request: ReceivedRequest): string => request.headers['webhook-id'] ?? '';

async function fifoEndpoint(orgId: string, path: string): Promise<string> {
  const { id } = await world.harness.createEndpoint(orgId, world.receiver.url(path));
  await world.harness.db.updateTable('webhook_endpoints').set({ ordering: 'FIFO' }).where('id', '=', id).execute();
  return id;
}

async function statusesOf(db: Kysely<Database>, endpointId: string, eventIds: readonly string[]) {
  const rows = await db
    .selectFrom('webhook_deliveries')
    .select(['event_id', 'status'])
    .where('endpoint_id', '=', endpointId)
    .execute();
  const byEvent = new Map(rows.map((row) => [row.event_id, row.status]));
  return eventIds.map((id) => byEvent.get(id));
}

/**
 * The receiver saw `events` in order: the first sighting of each is in publish order, and no request
 * skips ahead of one not yet seen (an event may come again, as delivery is at least once, e.g. after a
 * lease lapsed on a stalled machine; never one before its turn).
 */
function expectInOrder(seen: readonly string[], events: readonly string[]): void {
  expect([...new Set(seen)]).toEqual(events);
  let highest = -1;
  for (const id of seen) {
    const index = events.indexOf(id);
    expect(index).toBeLessThanOrEqual(highest + 1);
    highest = Math.max(highest, index);
  }
}

describe('a FIFO endpoint', () => {
  it('holds later events while its head is retried, then delivers them in order', async () => {
    const path = '/fifo-retry';
    const endpointId = await fifoEndpoint('org-fifo-retry', path);
    let events: string[] = [];
    // The head fails twice; every later event would succeed at once if it were (wrongly) attempted.
    world.receiver.behave((request) => {
      const failures = world.receiver.requestsTo(path).filter((seen) => eventIdOf(seen) === eventIdOf(request)).length;
      return eventIdOf(request) === events[0] && failures <= 2 ? { status: 500 } : { status: 200 };
    }, path);
    events = await world.harness.publish('org-fifo-retry', 5);
    await world.harness.startDispatcher();
    await world.receiver.waitFor(() => world.receiver.requestsTo(path).length >= 7, 20_000);
    await until(
      () => statusesOf(world.harness.db, endpointId, events),
      (statuses) => statuses.every((status) => status === 'SUCCEEDED'),
    );
    const seen = world.receiver.requestsTo(path).map(eventIdOf);
    expectInOrder(seen, events);
    // The second event went only after the head's third attempt, its first success.
    expect(seen.indexOf(events[1]!)).toBeGreaterThan(seen.lastIndexOf(events[0]!));
    expect(seen.filter((id) => id === events[0]).length).toBeGreaterThanOrEqual(3);
  });
});

describe('FIFO endpoints with a stuck head', () => {
  it('let the next event go once the head is DEAD, keep an unordered endpoint of the organisation going, and put a replay at the back of the line', async () => {
    const orgId = 'org-fifo-dead';
    const fifoPath = '/fifo-dead';
    const unorderedPath = '/fifo-dead-unordered';
    const endpointId = await fifoEndpoint(orgId, fifoPath);
    await world.harness.createEndpoint(orgId, world.receiver.url(unorderedPath));
    const failing = new Set<string>();
    world.receiver.behave((request) => (failing.has(eventIdOf(request)) ? { status: 500 } : { status: 200 }), fifoPath);
    const [head, ...rest] = await world.harness.publish(orgId, 1);
    failing.add(head!);
    rest.push(...(await world.harness.publish(orgId, 4)));
    // Retries give up after 3 s: the head goes DEAD within a few attempts.
    await world.harness.startDispatcher({ retryHorizonMs: 3_000 });

    // The unordered endpoint gets every event while the FIFO head is still failing.
    await world.receiver.waitFor(() => world.receiver.requestsTo(unorderedPath).length === 5, 20_000);
    const whileStuck = world.receiver.requestsTo(fifoPath).map(eventIdOf);
    expect(whileStuck.every((id) => id === head)).toBe(true);
    const stuck = await findWebhookFifoHead(world.harness.db, endpointId);
    if (stuck) {
      // Still stuck (not DEAD yet): the head is the first event and holds back the four after it.
      expect(stuck.delivery.event_id).toBe(head);
      expect(stuck.heldBack).toBe(4);
    }

    await until(
      () => statusesOf(world.harness.db, endpointId, [head!, ...rest]),
      (statuses) => statuses.join() === ['DEAD', 'SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED'].join(),
    );
    const seen = world.receiver.requestsTo(fifoPath).map(eventIdOf);
    const lastOfHead = seen.lastIndexOf(head!);
    expect(seen.slice(0, lastOfHead + 1).every((id) => id === head)).toBe(true);
    expect(seen.slice(lastOfHead + 1)).toEqual(rest);

    // A new stuck head, then a replay of the dead one: the replay waits behind it, at the back. From here
    // only a dispatcher that retries for a minute (the earlier tests' ones stopped too), so the new head
    // cannot go DEAD however slow the machine is.
    await world.harness.stopDispatchers();
    await world.harness.startDispatcher({ retryHorizonMs: 60_000 });
    const [second] = await world.harness.publish(orgId, 1);
    failing.add(second!);
    await world.receiver.waitFor(() =>
      world.receiver.requestsTo(fifoPath).some((request) => eventIdOf(request) === second),
    );
    failing.delete(head!);
    expect(await replayDeadLetters(world.harness.db, { all: true, endpointId })).toBe(1);
    const line = await findWebhookFifoHead(world.harness.db, endpointId);
    expect(line?.delivery.event_id).toBe(second);
    expect(line?.heldBack).toBe(1);
    // The replay is not attempted while the head before it fails…
    await new Promise((resolve) => setTimeout(resolve, 300));
    const beforeRelease = world.receiver.requestsTo(fifoPath).map(eventIdOf);
    expect(beforeRelease.slice(lastOfHead + 1 + rest.length).every((id) => id === second)).toBe(true);
    // …and goes once that head succeeds.
    failing.delete(second!);
    await until(
      () => statusesOf(world.harness.db, endpointId, [head!, second!]),
      (statuses) => statuses.every((status) => status === 'SUCCEEDED'),
    );
    const after = world.receiver
      .requestsTo(fifoPath)
      .map(eventIdOf)
      .slice(lastOfHead + 1 + rest.length);
    expect(after.at(-1)).toBe(head);
    expect(after.slice(0, -1).every((id) => id === second)).toBe(true);
  });
});

describe('two dispatchers on one FIFO endpoint', () => {
  it('deliver a backlog in strict publish order', async () => {
    const path = '/fifo-two';
    const endpointId = await fifoEndpoint('org-fifo-two', path);
    // A receiver that takes a moment, so both dispatchers hold work at once.
    world.receiver.behave(() => ({ status: 200, delayMs: 2 }), path);
    await world.harness.startDispatcher();
    await world.harness.startDispatcher();
    const events = await world.harness.publish('org-fifo-two', 150);
    await world.receiver.waitFor(() => world.receiver.requestsTo(path).length >= events.length, 30_000);
    await until(
      () => statusesOf(world.harness.db, endpointId, events),
      (statuses) => statuses.every((status) => status === 'SUCCEEDED'),
    );
    expectInOrder(world.receiver.requestsTo(path).map(eventIdOf), events);
  });
});

describe('two dispatchers on one FIFO endpoint, with retries and a replay', () => {
  it('hold the line behind each failing head until its success, and send a replay after the line, before later events', async () => {
    const orgId = 'org-fifo-two-retry';
    const path = '/fifo-two-retry';
    const endpointId = await fifoEndpoint(orgId, path);
    // Two heads along the line fail their first two attempts; everything else succeeds (after a moment,
    // so both dispatchers hold work at once). A head is known by its place in the order events first
    // arrive: dispatchers of earlier tests still run, and may send an event before publish() returns.
    const failingAt = [10, 30];
    const firstArrivals: string[] = [];
    world.receiver.behave((request) => {
      const id = eventIdOf(request);
      if (!firstArrivals.includes(id)) firstArrivals.push(id);
      const failing = failingAt.includes(firstArrivals.indexOf(id));
      const tries = world.receiver.requestsTo(path).filter((seen) => eventIdOf(seen) === id).length;
      return failing && tries <= 2 ? { status: 500, delayMs: 2 } : { status: 200, delayMs: 2 };
    }, path);
    const events = await world.harness.publish(orgId, 60);
    await Promise.all([world.harness.startDispatcher(), world.harness.startDispatcher()]);
    await until(
      () => statusesOf(world.harness.db, endpointId, events),
      (statuses) => statuses.every((status) => status === 'SUCCEEDED'),
    );
    const seen = world.receiver.requestsTo(path).map(eventIdOf);
    expectInOrder(seen, events);
    for (const index of failingAt) {
      // Three attempts of the head (more only if a stalled machine let a lease lapse), and the event
      // after it only after the third, its success.
      const tries = seen.flatMap((id, at) => (id === events[index] ? [at] : []));
      expect(tries.length).toBeGreaterThanOrEqual(3);
      expect(seen.indexOf(events[index + 1]!)).toBeGreaterThan(tries[2]!);
    }

    // A replay of an early success goes to the back of the line: after what waits, before what comes later.
    const { id: replayedDelivery } = await world.harness.db
      .selectFrom('webhook_deliveries')
      .select('id')
      .where('endpoint_id', '=', endpointId)
      .where('event_id', '=', events[5]!)
      .executeTakeFirstOrThrow();
    const before = seen.length;
    expect(await replayWebhookDelivery(world.harness.db, replayedDelivery)).toBeDefined();
    const later = await world.harness.publish(orgId, 20);
    await until(
      () => statusesOf(world.harness.db, endpointId, [events[5]!, ...later]),
      (statuses) => statuses.every((status) => status === 'SUCCEEDED'),
    );
    expectInOrder(world.receiver.requestsTo(path).map(eventIdOf).slice(before), [events[5]!, ...later]);
  });
});

describe('a FIFO endpoint with a fast receiver', () => {
  it('gets the next delivery while the last one is still being recorded, one POST at a time', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    const arrived: string[] = [];
    let answerHeld: (() => void) | undefined;
    let heldArrived!: () => void;
    const held = new Promise<void>((resolve) => {
      heldArrived = resolve;
    });
    // The fifth request is held until the test has locked its delivery's row; every other is answered at once.
    const server = createServer((req, res) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      arrived.push(String(req.headers['webhook-id']));
      req.resume();
      const answer = () => {
        inFlight--;
        res.end('ok');
      };
      if (arrived.length === 5) {
        answerHeld = answer;
        heldArrived();
      } else answer();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    let unlock: (() => void) | undefined;
    try {
      const { port } = server.address() as AddressInfo;
      const orgId = 'org-fifo-pipeline';
      const { id } = await world.harness.createEndpoint(orgId, `http://127.0.0.1:${port}/pipeline`);
      await world.harness.db.updateTable('webhook_endpoints').set({ ordering: 'FIFO' }).where('id', '=', id).execute();
      await world.harness.startDispatcher();
      const events = await world.harness.publish(orgId, 30);
      await held;
      // Recording the fifth delivery's outcome must now wait for this lock…
      const unlocked = new Promise<void>((resolve) => {
        unlock = resolve;
      });
      let locked!: () => void;
      const isLocked = new Promise<void>((resolve) => {
        locked = resolve;
      });
      const holder = world.harness.db.transaction().execute(async (trx) => {
        await sql`select id from webhook_deliveries where event_id = ${arrived[4]} for update`.execute(trx);
        locked();
        await unlocked;
      });
      await isLocked;
      answerHeld?.();
      // …yet the lane POSTs the deliveries it holds next, in order, without waiting for it.
      await until(
        async () => arrived.length,
        (count) => count >= 7,
      );
      const fifth = await world.harness.db
        .selectFrom('webhook_deliveries')
        .select('status')
        .where('event_id', '=', arrived[4]!)
        .executeTakeFirstOrThrow();
      expect(fifth.status).toBe('PENDING');
      unlock?.();
      await holder;
      await until(
        () => statusesOf(world.harness.db, id, events),
        (statuses) => statuses.every((status) => status === 'SUCCEEDED'),
      );
      expectInOrder(arrived, events);
      expect(maxInFlight).toBe(1);
    } finally {
      unlock?.();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('a FIFO endpoint in embedded mode (PGlite)', () => {
  it('delivers in publish order and holds later events behind a failing head', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'herald-embedded-fifo-'));
    const database = await createDatabase({ kind: 'embedded', dataDir });
    const dispatcher = createEmbeddedDispatcher({
      db: database.db,
      logger: pino({ level: 'silent' }),
      keyring: TEST_KEYRING,
      settings: FAST_SETTINGS,
    });
    try {
      await migrateToLatest(database.db);
      const path = '/fifo-embedded';
      const endpoint = await insertWebhookEndpoint(database.db, {
        orgId: 'org-fifo-embedded',
        url: world.receiver.url(path),
        eventTypes: ['post.published'],
        secret: generateWebhookSecret(),
        keyring: TEST_KEYRING,
        ordering: 'FIFO',
      });
      const events: string[] = [];
      for (let i = 0; i < 20; i++) {
        const id = newEventId();
        const created = new Date().toISOString();
        const data = { id: `post_${i}`, orgId: 'org-fifo-embedded', title: `post ${i}`, tags: [], status: 'PUBLISHED' };
        const author = { id: 'user_1', name: 'Ada' };
        const body = JSON.stringify({
          id,
          type: 'post.published',
          created,
          data: { ...data, publishedAt: created, author },
        });
        await insertOutboxEvent(database.db, {
          id,
          orgId: 'org-fifo-embedded',
          type: 'post.published',
          body,
          createdAt: new Date(),
        });
        events.push(id);
      }
      world.receiver.behave(
        (request, nth) => (eventIdOf(request) === events[0] && nth <= 2 ? { status: 500 } : { status: 200 }),
        path,
      );
      await dispatcher.start();
      await until(
        () => statusesOf(database.db, endpoint.id, events),
        (statuses) => statuses.every((status) => status === 'SUCCEEDED'),
      );
      const seen = world.receiver.requestsTo(path).map(eventIdOf);
      expectInOrder(seen, events);
      expect(seen.indexOf(events[1]!)).toBeGreaterThan(seen.lastIndexOf(events[0]!));
      expect(seen.filter((id) => id === events[0]).length).toBeGreaterThanOrEqual(3);
    } finally {
      await dispatcher.stop();
      await database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
