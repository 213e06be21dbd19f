import { createTestSchema } from '@herald/testing';
import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createDatabase, type HeraldDatabase } from './create-database.js';
import type { Database } from './database.js';
import { migrateToLatest } from './migrate.js';
import {
  claimDeliveryForAttempt,
  claimDueDeliveries,
  claimNextDueDelivery,
  fanOutEvent,
  recordDeliveryAttempt,
  releaseQueuedDeliveries,
  replayWebhookDelivery,
} from './webhook-deliveries.js';
import { deleteWebhookEndpoint, insertWebhookEndpoint } from './webhook-endpoints.js';
import { claimOutboxForRelay, insertOutboxEvent, newWebhookEventId, resetOutboxRelay } from './webhook-outbox.js';

// The leases that keep a delivery with one holder at a time, on both backends.

const backends = [
  {
    name: 'PostgreSQL',
    open: async () => createDatabase({ kind: 'postgres', url: (await createTestSchema(inject('databaseUrl'))).url }),
  },
  { name: 'embedded PGlite', open: () => createDatabase({ kind: 'embedded', dataDir: 'memory://' }) },
];

describe.each(backends)('webhook deliveries on $name', ({ open }) => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;
  let orgCounter = 0;

  beforeAll(async () => {
    database = await open();
    db = database.db;
    await migrateToLatest(db);
  });

  afterAll(() => database.close());

  async function world(endpoints = 1) {
    const orgId = `org-${++orgCounter}`;
    const ids: string[] = [];
    for (let i = 0; i < endpoints; i++) {
      ids.push(
        (
          await insertWebhookEndpoint(db, {
            orgId,
            url: 'https://93.184.215.14/',
            eventTypes: ['post.published'],
            secret: 'whsec_x',
          })
        ).id,
      );
    }
    const publish = async () => {
      const id = newWebhookEventId();
      await insertOutboxEvent(db, { id, orgId, type: 'post.published', body: `{"id":"${id}"}` });
      return id;
    };
    return { orgId, endpoints: ids, publish };
  }

  it('relays each event until it is dispatched, and again after a reset', async () => {
    const { publish } = await world();
    const eventId = await publish();
    expect(await claimOutboxForRelay(db, { limit: 1_000, resendAfterMs: 60_000 })).toContain(eventId);
    expect(await claimOutboxForRelay(db, { limit: 1_000, resendAfterMs: 60_000 })).not.toContain(eventId);
    await resetOutboxRelay(db);
    expect(await claimOutboxForRelay(db, { limit: 1_000, resendAfterMs: 60_000 })).toContain(eventId);
    await fanOutEvent(db, eventId);
    await resetOutboxRelay(db);
    expect(await claimOutboxForRelay(db, { limit: 1_000, resendAfterMs: 60_000 })).not.toContain(eventId);
  });

  it('fans an event out once per endpoint, however often it arrives', async () => {
    const { publish, endpoints } = await world(2);
    const eventId = await publish();
    expect(await fanOutEvent(db, eventId)).toEqual({ found: true, created: 2 });
    expect(await fanOutEvent(db, eventId)).toEqual({ found: true, created: 0 });
    expect(await fanOutEvent(db, 'evt_unknown')).toEqual({ found: false, created: 0 });
    const rows = await db
      .selectFrom('webhook_deliveries')
      .select('endpoint_id')
      .where('event_id', '=', eventId)
      .execute();
    expect(rows.map((row) => row.endpoint_id).sort()).toEqual([...endpoints].sort());
  });

  it('hands out at most endpointConcurrency deliveries per endpoint, and each to one holder', async () => {
    const { publish, endpoints } = await world();
    for (let i = 0; i < 5; i++) await fanOutEvent(db, await publish());
    const mine = <T extends { endpointId: string }>(list: T[]) =>
      list.filter((item) => item.endpointId === endpoints[0]);

    const first = mine(await claimDueDeliveries(db, { limit: 100, leaseMs: 60_000, endpointConcurrency: 2 }));
    expect(first).toHaveLength(2);
    expect(mine(await claimDueDeliveries(db, { limit: 100, leaseMs: 60_000, endpointConcurrency: 2 }))).toEqual([]);

    // The queue entry's lease claims the delivery once; a duplicate entry claims nothing.
    const work = first[0]!;
    const claimed = await claimDeliveryForAttempt(db, { deliveryId: work.id, queueLease: work.lease, leaseMs: 60_000 });
    expect(claimed).toMatchObject({ id: work.id, secrets: ['whsec_x'], attemptCount: 0 });
    expect(
      await claimDeliveryForAttempt(db, { deliveryId: work.id, queueLease: work.lease, leaseMs: 60_000 }),
    ).toBeUndefined();

    // Passing the slot on: the next due delivery nobody holds.
    const next = await claimNextDueDelivery(db, { endpointId: endpoints[0]!, leaseMs: 60_000 });
    expect(next).toBeDefined();
    expect([first[0]!.id, first[1]!.id]).not.toContain(next!.id);

    // Recording needs the attempt's lease; the attempt is kept either way.
    const attempt = { at: new Date(), statusCode: 200, durationMs: 3, error: null };
    expect(
      await recordDeliveryAttempt(db, {
        deliveryId: work.id,
        attemptLease: 'a:stale',
        attempt,
        next: { status: 'SUCCEEDED' },
      }),
    ).toBe('lease-lost');
    expect(
      await recordDeliveryAttempt(db, {
        deliveryId: work.id,
        attemptLease: claimed!.attemptLease,
        attempt,
        next: { status: 'SUCCEEDED' },
      }),
    ).toBe('recorded');
    const attempts = await db.selectFrom('webhook_attempts').selectAll().where('delivery_id', '=', work.id).execute();
    expect(attempts).toHaveLength(2);
    expect(
      await claimDeliveryForAttempt(db, { deliveryId: work.id, queueLease: work.lease, leaseMs: 60_000 }),
    ).toBeUndefined();

    // Released queue leases (the queue lost its entries) make the deliveries available again.
    expect(await releaseQueuedDeliveries(db)).toBeGreaterThanOrEqual(1);
    expect(mine(await claimDueDeliveries(db, { limit: 100, leaseMs: 60_000, endpointConcurrency: 2 }))).toHaveLength(1);
  });

  it('schedules a retry, and a replay restarts the horizon', async () => {
    const { publish, endpoints } = await world();
    const eventId = await publish();
    await fanOutEvent(db, eventId);
    const claimed = await claimNextDueDelivery(db, { endpointId: endpoints[0]!, leaseMs: 60_000 });
    const attempt = { at: new Date(), statusCode: 500, durationMs: 3, error: 'HTTP 500' };
    await recordDeliveryAttempt(db, {
      deliveryId: claimed!.id,
      attemptLease: claimed!.attemptLease,
      attempt,
      next: { status: 'PENDING', retryInMs: 60_000 },
    });
    const waiting = await db
      .selectFrom('webhook_deliveries')
      .selectAll()
      .where('id', '=', claimed!.id)
      .executeTakeFirstOrThrow();
    expect(waiting).toMatchObject({ status: 'PENDING', attempt_count: 1, lease_token: null });
    expect(waiting.next_attempt_at!.getTime()).toBeGreaterThan(Date.now() + 30_000);
    expect(await claimNextDueDelivery(db, { endpointId: endpoints[0]!, leaseMs: 60_000 })).toBeUndefined();

    const replayed = await replayWebhookDelivery(db, claimed!.id);
    expect(replayed).toMatchObject({ status: 'PENDING', attempt_count: 1 });
    expect(replayed!.next_attempt_at!.getTime()).toBeLessThanOrEqual(Date.now() + 1_000);
    expect((await claimNextDueDelivery(db, { endpointId: endpoints[0]!, leaseMs: 60_000 }))?.ageMs).toBeLessThan(
      30_000,
    );
  });

  it('drops a deleted endpoint with its deliveries; a late record finds the delivery gone', async () => {
    const { publish, endpoints, orgId } = await world();
    await fanOutEvent(db, await publish());
    const claimed = await claimNextDueDelivery(db, { endpointId: endpoints[0]!, leaseMs: 60_000 });
    expect(await deleteWebhookEndpoint(db, endpoints[0]!, ['another-org'])).toBe(false);
    expect(await deleteWebhookEndpoint(db, endpoints[0]!, [orgId])).toBe(true);
    const attempt = { at: new Date(), statusCode: 200, durationMs: 3, error: null };
    expect(
      await recordDeliveryAttempt(db, {
        deliveryId: claimed!.id,
        attemptLease: claimed!.attemptLease,
        attempt,
        next: { status: 'SUCCEEDED' },
      }),
    ).toBe('gone');
  });
});
