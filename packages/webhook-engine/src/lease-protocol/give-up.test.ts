import { findWebhookFifoHead } from '@herald/db';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { fanOutOutbox } from '../lease-protocol.js';
import { toWorkMessages } from '../queue/webhook-queue.js';
import { dispatcherWorld } from '../testing/dispatcher-world.js';
import { type ReceivedRequest, startTestReceiver } from '../testing/test-receiver.js';
import { until } from '../testing/until.js';
import { giveUpWebhookDelivery } from './give-up.js';

// Giving up on a delivery by hand, against a real dispatcher, Redis stream, PostgreSQL schema and HTTP
// receiver: a FIFO endpoint's head that keeps failing is made DEAD now, with its `webhook.delivery.dead`
// event, and the rest of the line goes in order; what cannot be given up is refused and left as it was.

const world = dispatcherWorld(startTestReceiver);

const eventIdOf = (request: ReceivedRequest): string => request.headers['webhook-id'] ?? '';

const deliveriesOf = (endpointId: string) =>
  world.harness.db
    .selectFrom('webhook_deliveries')
    .select(['id', 'event_id', 'status', 'attempt_count', 'lease_token', 'next_attempt_at'])
    .where('endpoint_id', '=', endpointId)
    .orderBy('seq')
    .execute();

const deadEventsOf = async (orgId: string) =>
  (
    await world.harness.db
      .selectFrom('webhook_outbox')
      .select(['body', 'exclude_endpoint_id'])
      .where('org_id', '=', orgId)
      .where('type', '=', 'webhook.delivery.dead')
      .execute()
  ).map((row) => ({ ...JSON.parse(row.body), excluded: row.exclude_endpoint_id }));

describe('giving up on a delivery', () => {
  it("makes a FIFO endpoint's failing head DEAD with its event, and the line behind it goes in order", async () => {
    const orgId = 'org-give-up';
    const path = '/give-up';
    const { id: endpointId } = await world.harness.createEndpoint(orgId, world.receiver.url(path));
    await world.harness.db
      .updateTable('webhook_endpoints')
      .set({ ordering: 'FIFO' })
      .where('id', '=', endpointId)
      .execute();
    const [head] = await world.harness.publish(orgId, 1);
    world.receiver.behave((request) => (eventIdOf(request) === head ? { status: 422 } : { status: 200 }), path);
    const rest = await world.harness.publish(orgId, 3);
    // Retries for an hour, 30 s apart: without giving up, the head would hold the line all test long.
    await world.harness.startDispatcher({ retryHorizonMs: 3_600_000, retryBaseMs: 30_000 });
    await world.receiver.waitFor(() => world.receiver.requestsTo(path).length > 0, 30_000);
    const stuck = await until(
      () => findWebhookFifoHead(world.harness.db, endpointId),
      (line) => line?.delivery.attempt_count === 1 && line.delivery.lease_token === null,
    );
    expect(stuck?.delivery.event_id).toBe(head);
    expect(stuck?.heldBack).toBe(3);

    // Behind the head, never attempted: nothing to give up on.
    const waiting = (await deliveriesOf(endpointId)).find((row) => row.event_id === rest[0])!;
    expect(await giveUpWebhookDelivery(world.harness.db, { id: waiting.id, orgIds: [orgId] })).toEqual({
      outcome: 'not-attempted',
    });
    // Another organisation's caller does not see it.
    expect(await giveUpWebhookDelivery(world.harness.db, { id: stuck!.delivery.id, orgIds: ['org-other'] })).toEqual({
      outcome: 'absent',
    });

    const given = await giveUpWebhookDelivery(world.harness.db, { id: stuck!.delivery.id, orgIds: [orgId] });
    expect(given).toMatchObject({ outcome: 'dead', delivery: { id: stuck!.delivery.id, status: 'DEAD' } });
    const statuses = await until(
      async () => (await deliveriesOf(endpointId)).map((row) => [row.event_id, row.status]),
      (rows) => rows.filter(([, status]) => status === 'SUCCEEDED').length === 3,
    );
    expect(statuses).toEqual([[head, 'DEAD'], ...rest.map((id) => [id, 'SUCCEEDED'])]);
    // The head once (its retry was 30 s away), then the rest in order.
    expect(world.receiver.requestsTo(path).map(eventIdOf)).toEqual([head, ...rest]);
    // Its event, as the dispatcher writes one at the horizon, for the organisation's other endpoints.
    expect(await deadEventsOf(orgId)).toEqual([
      expect.objectContaining({
        type: 'webhook.delivery.dead',
        data: {
          deliveryId: stuck!.delivery.id,
          endpointId,
          eventId: head,
          eventType: 'post.published',
          attempts: 1,
          lastError: 'HTTP 422',
        },
        excluded: endpointId,
      }),
    ]);
    // Given up once: a second time is refused, and writes no second event.
    expect(await giveUpWebhookDelivery(world.harness.db, { id: stuck!.delivery.id, orgIds: [orgId] })).toEqual({
      outcome: 'not-pending',
      status: 'DEAD',
    });
    expect(await deadEventsOf(orgId)).toHaveLength(1);
    await world.harness.stopDispatchers();
  }, 90_000);

  it('refuses while an attempt is in flight, and changes nothing', async () => {
    const orgId = 'org-give-up-flight';
    const { id: endpointId } = await world.harness.createEndpoint(orgId, world.receiver.url('/give-up-flight'));
    await world.harness.publish(orgId, 1);
    // No dispatcher: the delivery is made by hand as one whose attempt is running on another dispatcher.
    await fanOutOutbox(world.harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const [delivery] = await deliveriesOf(endpointId);
    const leasedUntil = new Date(Date.now() + 60_000);
    await world.harness.db
      .updateTable('webhook_deliveries')
      .set({ attempt_count: 1, lease_token: 'a:other-dispatcher', leased_until: leasedUntil })
      .where('id', '=', delivery!.id)
      .execute();
    expect(await giveUpWebhookDelivery(world.harness.db, { id: delivery!.id, orgIds: [orgId] })).toEqual({
      outcome: 'in-flight',
      leasedUntil,
    });
    expect((await deliveriesOf(endpointId))[0]).toMatchObject({ status: 'PENDING', lease_token: 'a:other-dispatcher' });
    expect(await deadEventsOf(orgId)).toEqual([]);
    // Its lease over (that dispatcher died): it can be given up.
    await sql`update webhook_deliveries set leased_until = now() - interval '1 second' where id = ${delivery!.id}`.execute(
      world.harness.db,
    );
    expect(await giveUpWebhookDelivery(world.harness.db, { id: delivery!.id, orgIds: [orgId] })).toMatchObject({
      outcome: 'dead',
      delivery: { status: 'DEAD', lease_token: null, leased_until: null },
    });
  }, 60_000);

  it('never POSTs a delivery given up while its work entry was already in the stream', async () => {
    const orgId = 'org-give-up-queued';
    const path = '/give-up-queued';
    const { id: endpointId } = await world.harness.createEndpoint(orgId, world.receiver.url(path));
    const [given] = await world.harness.publish(orgId, 1);
    // Fanned out and its work entry in the stream, as the relay leaves it; then it has failed once.
    const { queued } = await fanOutOutbox(world.harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const queue = world.harness.newQueue();
    await queue.init();
    await queue.enqueue(toWorkMessages(queued.filter((item) => item.endpointId === endpointId)));
    const [delivery] = await deliveriesOf(endpointId);
    expect(delivery!.lease_token).toMatch(/^q:/);
    await world.harness.db
      .updateTable('webhook_deliveries')
      .set({ attempt_count: 1 })
      .where('id', '=', delivery!.id)
      .execute();

    expect(await giveUpWebhookDelivery(world.harness.db, { id: delivery!.id, orgIds: [orgId] })).toMatchObject({
      outcome: 'dead',
      delivery: { lease_token: null },
    });
    // A dispatcher reads that entry, and delivers the next event: the given-up one never goes out.
    await world.harness.startDispatcher();
    const [next] = await world.harness.publish(orgId, 1);
    await world.receiver.waitFor(() => world.receiver.requestsTo(path).length > 0, 30_000);
    await until(
      () => deliveriesOf(endpointId),
      (rows) => rows.some((row) => row.event_id === next && row.status === 'SUCCEEDED'),
    );
    expect(world.receiver.requestsTo(path).map(eventIdOf)).toEqual([next]);
    expect((await deliveriesOf(endpointId)).find((row) => row.event_id === given)?.status).toBe('DEAD');
    await world.harness.stopDispatchers();
  }, 60_000);

  it('changes nothing when its PostgreSQL connection is lost while it waits for the row, and works once the database answers again', async () => {
    const orgId = 'org-give-up-lost';
    const { id: endpointId } = await world.harness.createEndpoint(orgId, world.receiver.url('/give-up-lost'));
    await world.harness.publish(orgId, 1);
    await fanOutOutbox(world.harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const [delivery] = await deliveriesOf(endpointId);
    await world.harness.db
      .updateTable('webhook_deliveries')
      .set({ attempt_count: 1, lease_token: null, leased_until: null })
      .where('id', '=', delivery!.id)
      .execute();
    // The give-up on a connection of its own, stopped at the row lock another transaction holds; that
    // connection's backend is then terminated (a failover, a restart), the transaction never committing.
    const single = await world.harness.openSingleConnection();
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let locked!: (pid: number) => void;
    const holderPid = new Promise<number>((resolve) => {
      locked = resolve;
    });
    const holding = world.harness.db.transaction().execute(async (trx) => {
      const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx);
      await trx.selectFrom('webhook_deliveries').select('id').where('id', '=', delivery!.id).forUpdate().execute();
      locked(rows[0]!.pid);
      await released;
    });
    try {
      const holder = await holderPid;
      const lost = giveUpWebhookDelivery(single.db, { id: delivery!.id, orgIds: [orgId] }).then(
        () => 'resolved',
        (error: Error) => error.message,
      );
      const waiter = await until(
        async () =>
          (
            await sql<{
              pid: number;
            }>`select pid from pg_stat_activity where ${holder} = any(pg_blocking_pids(pid))`.execute(world.harness.db)
          ).rows[0]?.pid,
        (pid) => pid !== undefined,
      );
      await sql`select pg_terminate_backend(${waiter})`.execute(world.harness.db);
      expect(await lost).toMatch(/terminat|connection/i);
    } finally {
      release();
      await holding;
    }
    expect((await deliveriesOf(endpointId))[0]).toMatchObject({ status: 'PENDING' });
    expect(await deadEventsOf(orgId)).toEqual([]);
    // Another connection (the database answering again): the same give-up goes through, once.
    expect(await giveUpWebhookDelivery(world.harness.db, { id: delivery!.id, orgIds: [orgId] })).toMatchObject({
      outcome: 'dead',
    });
    expect(await deadEventsOf(orgId)).toHaveLength(1);
  }, 60_000);
});
