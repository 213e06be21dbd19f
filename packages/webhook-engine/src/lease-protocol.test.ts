import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  createDatabase,
  createWebhookAttemptsLoader,
  deleteWebhookEndpoint,
  findWebhookEndpointById,
  migrateToLatest,
  openSecret,
  sealSecret,
} from '@herald/db';
import { createTestSchema, TEST_KEYRING } from '@herald/testing';
import { sql } from 'kysely';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { createConsumer, MAX_ENTRY_RECEIVES } from './consumer.js';
import { streamMissedDeadLetters } from './dead-letters.js';
import { readResponseStart } from './deliver.js';
import type { Dispatcher } from './dispatcher.js';
import {
  type AttemptOutcome,
  claimDeliveries,
  fanOutOutbox,
  growEndpointSlots,
  queueDueDeliveries,
  recordOutcomes,
  replayWebhookDelivery,
  setWebhookEndpointOrdering,
} from './lease-protocol.js';
import type { WebhookQueue } from './queue/webhook-queue.js';
import { createRetention } from './retention.js';
import { createDispatcherHarness, type DispatcherHarness } from './testing/harness.js';
import { attemptOutcome } from './testing/outcomes.js';
import { startTestReceiver, type TestReceiver } from './testing/test-receiver.js';
import { until } from './testing/until.js';

let harness: DispatcherHarness;
let receiver: TestReceiver;
const logger = pino({ level: 'silent' });
const DAY_MS = 86_400_000;

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  receiver = await startTestReceiver(() => ({ status: 200 }));
});

afterAll(async () => {
  await receiver?.close();
  await harness?.close();
});

const deliveriesOf = (orgId: string) =>
  harness.db.selectFrom('webhook_deliveries').selectAll().where('org_id', '=', orgId).orderBy('seq').execute();
const attemptIdsOf = (deliveryId: string) =>
  harness.db.selectFrom('webhook_attempt_log').select('id').where('delivery_id', '=', deliveryId).execute();

/** A new endpoint of `orgId` with `events` published and fanned out: the endpoint and its queued deliveries. */
async function endpointWithDeliveries(orgId: string, events = 1) {
  const endpoint = await harness.createEndpoint(orgId, receiver.url(`/${orgId}`));
  await harness.publish(orgId, events);
  const { queued } = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
  return { endpoint, queued: queued.filter((item) => item.endpointId === endpoint.id) };
}

/** A failed attempt of `delivery` (HTTP 500, retried in a minute), `fields` overriding any part. */
function outcome(delivery: Parameters<typeof attemptOutcome>[0], fields: Partial<AttemptOutcome>): AttemptOutcome {
  return attemptOutcome(delivery, {
    statusCode: 500,
    durationMs: 5,
    error: 'HTTP 500',
    next: { status: 'PENDING', retryInMs: 60_000 },
    health: 'failure',
    ...fields,
  });
}

describe('fan-out', () => {
  it('records SKIPPED for a disabled endpoint and honours target and exclude endpoints', async () => {
    const enabled = await harness.createEndpoint('org-fan', receiver.url('/fan-a'));
    const disabled = await harness.createEndpoint('org-fan', receiver.url('/fan-b'));
    await harness.db
      .updateTable('webhook_endpoints')
      .set({ status: 'DISABLED' })
      .where('id', '=', disabled.id)
      .execute();
    const [eventId] = await harness.publish('org-fan');
    const result = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    expect(result.queued.map((item) => item.endpointId)).toEqual([enabled.id]);
    const rows = await deliveriesOf('org-fan');
    expect(rows.map((row) => [row.endpoint_id, row.status, row.event_id])).toEqual([
      [enabled.id, 'PENDING', eventId],
      [disabled.id, 'SKIPPED', eventId],
    ]);
    expect(rows.find((row) => row.status === 'SKIPPED')?.lease_token).toBeNull();

    // webhook.test goes to its target only, though no endpoint lists that type; an operational event
    // never goes to the endpoint it is about.
    const other = await harness.createEndpoint('org-fan', receiver.url('/fan-c'));
    await harness.db
      .insertInto('webhook_outbox')
      .values([
        { id: 'evt_target', org_id: 'org-fan', type: 'webhook.test', body: '{}', target_endpoint_id: other.id },
        { id: 'evt_exclude', org_id: 'org-fan', type: 'post.published', body: '{}', exclude_endpoint_id: other.id },
      ])
      .execute();
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const byEvent = (id: string) =>
      harness.db.selectFrom('webhook_deliveries').select('endpoint_id').where('event_id', '=', id).execute();
    expect((await byEvent('evt_target')).map((row) => row.endpoint_id)).toEqual([other.id]);
    expect((await byEvent('evt_exclude')).map((row) => row.endpoint_id).sort()).toEqual(
      [enabled.id, disabled.id].sort(),
    );
  });

  it("returns the batch's event count and sampled trace contexts once, whether its events made many deliveries or none", async () => {
    await harness.createEndpoint('org-fan-traced', receiver.url('/traced-a'));
    await harness.createEndpoint('org-fan-traced', receiver.url('/traced-b'));
    await fanOutOutbox(harness.db, { limit: 1_000, queueLeaseMs: 60_000 }); // anything earlier tests left
    const traceparent = (n: number) => `00-${String(n).repeat(32)}-${String(n).repeat(16)}-0${n % 2}`;
    await harness.db
      .insertInto('webhook_outbox')
      .values([
        // Two endpoints each: a sampled trace context, an unsampled one (flags 00), none; one event no
        // endpoint takes.
        {
          id: 'evt_traced_1',
          org_id: 'org-fan-traced',
          type: 'post.published',
          body: '{}',
          traceparent: traceparent(1),
        },
        {
          id: 'evt_traced_2',
          org_id: 'org-fan-traced',
          type: 'post.published',
          body: '{}',
          traceparent: traceparent(2),
        },
        { id: 'evt_untraced', org_id: 'org-fan-traced', type: 'post.published', body: '{}' },
        { id: 'evt_nobody', org_id: 'org-fan-nobody', type: 'post.published', body: '{}', traceparent: traceparent(3) },
      ])
      .execute();
    const result = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    expect(result.events).toBe(4);
    expect(result.queued).toHaveLength(6);
    expect([...result.traceparents].sort()).toEqual([traceparent(1), traceparent(3)]);

    // A batch whose only event no endpoint takes still counts it and carries its trace context.
    await harness.db
      .insertInto('webhook_outbox')
      .values({
        id: 'evt_nobody_2',
        org_id: 'org-fan-nobody',
        type: 'post.published',
        body: '{}',
        traceparent: traceparent(5),
      })
      .execute();
    expect(await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 })).toEqual({
      events: 1,
      queued: [],
      skipped: 0,
      traceparents: [traceparent(5)],
    });
    expect(await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 })).toEqual({
      events: 0,
      queued: [],
      skipped: 0,
      traceparents: [],
    });
  });
});

describe('prepared statements', () => {
  it('sends fan-out, claim, hand-over record and due scan as prepared statements (planned once per connection)', async () => {
    // One connection, so pg_prepared_statements (per session) shows everything this pool prepared.
    const prepared = await createDatabase({
      kind: 'postgres',
      url: harness.schema.url,
      poolMax: 1,
      preparedStatements: true,
    });
    try {
      const endpoint = await harness.createEndpoint('org-prep', receiver.url('/prep'));
      await harness.publish('org-prep', 3);
      const { queued } = await fanOutOutbox(prepared.db, { limit: 100, queueLeaseMs: 60_000 });
      const claimed = await claimDeliveries(prepared.db, { queued, endpointCap: 2, leaseMs: 60_000 });
      expect(claimed).toHaveLength(2);
      const result = await recordOutcomes(
        prepared.db,
        claimed.map((delivery) => outcome(delivery, { next: { status: 'SUCCEEDED' }, health: 'success' })),
        { disableAfterMs: DAY_MS, handOver: { endpointId: endpoint.id, leaseMs: 60_000 } },
      );
      expect(result.handedOver).toHaveLength(1);
      await queueDueDeliveries(prepared.db, { limit: 10, queueLeaseMs: 60_000 });
      const { rows } = await sql<{ statement: string }>`select statement from pg_prepared_statements`.execute(
        prepared.db,
      );
      const has = (fragment: string) => rows.some((row) => row.statement.includes(fragment));
      expect(has('from herald_webhook_fan_out(')).toBe(true);
      expect(has('from herald_webhook_claim(')).toBe(true);
      expect(has('insert into webhook_attempts')).toBe(true);
      expect(has('where delivery.id = due.id')).toBe(true);
    } finally {
      await prepared.close();
    }
  });

  it('keeps looking deliveries up by primary key once the tables grow, though its plans were made when they were empty', async () => {
    // A prepared statement runs a generic plan from its sixth execution on, made from the table sizes of
    // that moment and kept until the next ANALYZE: made on a new (empty) table, a join on the ids could
    // become a sequential scan of webhook_deliveries whose cost grows with every delivery made since.
    const schema = await createTestSchema(inject('databaseUrl'));
    const fresh = await createDatabase({ kind: 'postgres', url: schema.url, poolMax: 1, preparedStatements: true });
    try {
      await migrateToLatest(fresh.db);
      await sql`insert into webhook_endpoints (id, org_id, url, event_types)
        values ('we_plan', 'org-plan', ${receiver.url('/plan')}, '{post.published}')`.execute(fresh.db);
      await sql`insert into webhook_endpoint_secrets (endpoint_id, sealed_secret)
        values ('we_plan', ${sealSecret(TEST_KEYRING, 'we_plan', 'whsec_plan')})`.execute(fresh.db);
      const seqScans = async () => {
        await sql`select pg_stat_force_next_flush()`.execute(fresh.db);
        await sql`select 1`.execute(fresh.db);
        const { rows } = await sql<{ n: string }>`select seq_scan as n from pg_stat_user_tables
          where schemaname = ${schema.schema} and relname = 'webhook_deliveries'`.execute(harness.db);
        return Number(rows[0]?.n);
      };
      let before = 0;
      for (let round = 0; round < 10; round++) {
        // Past the five custom plans, the rest run the generic ones.
        if (round === 7) before = await seqScans();
        await sql`insert into webhook_outbox (id, org_id, type, body)
          select 'evt_plan_' || ${round}::int || '_' || n, 'org-plan', 'post.published', '{}'
          from generate_series(1, 3) n`.execute(fresh.db);
        const { queued } = await fanOutOutbox(fresh.db, { limit: 100, queueLeaseMs: 60_000 });
        const claimed = await claimDeliveries(fresh.db, { queued, endpointCap: 2, leaseMs: 60_000 });
        const result = await recordOutcomes(
          fresh.db,
          claimed.map((delivery) => outcome(delivery, { next: { status: 'SUCCEEDED' }, health: 'success' })),
          { disableAfterMs: DAY_MS, handOver: { endpointId: 'we_plan', leaseMs: 60_000, renew: [], release: [] } },
        );
        await recordOutcomes(
          fresh.db,
          result.handedOver.map((delivery) => outcome(delivery, { next: { status: 'SUCCEEDED' }, health: 'success' })),
          { disableAfterMs: DAY_MS },
        );
      }
      expect(await seqScans()).toBe(before);
    } finally {
      await fresh.close();
    }
  });
});

describe('claim', () => {
  it("claims in one round trip, and grows a lane's slots in one: the locks and the statement are one call", async () => {
    const { endpoint, queued } = await endpointWithDeliveries('org-one-trip', 3);
    const single = await harness.openSingleConnection();
    await sql`select 1`.execute(single.db);
    // Every statement the pg client sends, BEGIN and COMMIT included (a round trip each).
    const sent: string[] = [];
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function counted(this: pg.Client, ...args: unknown[]) {
      const first = args[0];
      sent.push(typeof first === 'string' ? first : String((first as { text?: string }).text));
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof query;
    try {
      const claimed = await claimDeliveries(single.db, { queued, endpointCap: 2, leaseMs: 60_000 });
      expect(claimed).toHaveLength(2);
      expect(sent).toHaveLength(1);
      const grown = await growEndpointSlots(single.db, {
        endpointId: endpoint.id,
        lease: claimed[0]!.lease,
        want: 3,
        endpointCap: 3,
      });
      expect(grown).toEqual({ slots: 3, others: 0 });
      expect(sent).toHaveLength(2);
    } finally {
      pg.Client.prototype.query = query;
    }
    // What the claim wrote: the two deliveries under its lease, its lane's registration (then grown).
    const rows = await deliveriesOf('org-one-trip');
    expect(rows.filter((row) => row.lease_token?.startsWith('a:'))).toHaveLength(2);
    const { rows: slots } = await sql<{ slots: number }>`
      select slots from webhook_endpoint_slots where endpoint_id = ${endpoint.id}`.execute(harness.db);
    expect(slots).toEqual([{ slots: 3 }]);
  });

  it('plans the claim, the slot growth and the fan-out once per connection, and never JIT-compiles them', async () => {
    // Per call, a custom plan cost the claim about four times its CPU, and JIT compilation of the generic plan
    // (whose estimates grow with the tables) over a hundred times: both are settings of the functions.
    const { rows } = await sql<{ name: string; config: string[] }>`
      select proname as name, proconfig as config from pg_proc
      where oid in ('herald_webhook_claim'::regproc, 'herald_webhook_grow_slots'::regproc,
        'herald_webhook_fan_out'::regproc)
      order by proname`.execute(harness.db);
    expect(rows.map((row) => row.name)).toEqual([
      'herald_webhook_claim',
      'herald_webhook_fan_out',
      'herald_webhook_grow_slots',
    ]);
    for (const row of rows) {
      expect(row.config).toEqual(expect.arrayContaining(['plan_cache_mode=force_generic_plan', 'jit=off']));
    }
  });

  it('claims without JIT-compiling its statement even where the session JIT-compiles every plan', async () => {
    const { queued } = await endpointWithDeliveries('org-no-jit', 2);
    const single = await harness.openSingleConnection();
    // auto_explain sends each executed plan, nested ones included, to this client as a NOTICE; every plan
    // costs more than jit_above_cost = 0, so a statement not under `jit = off` shows a "JIT:" section.
    const notices: string[] = [];
    const emit = pg.Client.prototype.emit;
    pg.Client.prototype.emit = function captured(this: pg.Client, event: string | symbol, ...args: unknown[]) {
      if (event === 'notice') notices.push(String((args[0] as { message?: string }).message));
      return emit.call(this, event, ...args);
    };
    try {
      await sql`load 'auto_explain'`.execute(single.db);
      for (const setting of [
        sql`set auto_explain.log_level = notice`,
        sql`set auto_explain.log_min_duration = 0`,
        sql`set auto_explain.log_nested_statements = on`,
        sql`set jit_above_cost = 0`,
      ]) {
        await setting.execute(single.db);
      }
      const { rows } = await sql<{ jit: boolean }>`select pg_jit_available() as jit`.execute(single.db);
      if (rows[0]!.jit) {
        // The check can fail: a statement of this session outside the functions is JIT-compiled.
        await sql`select count(*) from webhook_deliveries`.execute(single.db);
        expect(notices.some((notice) => notice.includes('JIT:'))).toBe(true);
      }
      notices.length = 0;
      const claimed = await claimDeliveries(single.db, { queued, endpointCap: 2, leaseMs: 60_000 });
      expect(claimed).toHaveLength(2);
      // The calling statement is the session's (a cost of about 60, far under the default threshold);
      // the statements inside the function are the claim's.
      const inside = notices.filter((notice) => !notice.includes('from herald_webhook_claim('));
      expect(inside.some((notice) => notice.includes('webhook_deliveries'))).toBe(true);
      expect(inside.filter((notice) => notice.includes('JIT:'))).toEqual([]);
    } finally {
      pg.Client.prototype.emit = emit;
    }
  });

  it('hands the slots a successful batch frees to the next due deliveries, never more than it held', async () => {
    const endpoint = await harness.createEndpoint('org-hand', receiver.url('/hand'));
    await harness.publish('org-hand', 6);
    const { queued } = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const claimed = await claimDeliveries(harness.db, { queued, endpointCap: 2, leaseMs: 60_000 });
    expect(claimed).toHaveLength(2);
    // One of the two leases has expired: it no longer counts against the cap, so it frees no slot.
    await harness.db
      .updateTable('webhook_deliveries')
      .set({ leased_until: new Date(Date.now() - 1_000) })
      .where('id', '=', claimed[1]!.id)
      .execute();
    const result = await recordOutcomes(
      harness.db,
      claimed.map((delivery) => outcome(delivery, { next: { status: 'SUCCEEDED' }, health: 'success' })),
      { disableAfterMs: DAY_MS, handOver: { endpointId: endpoint.id, leaseMs: 60_000 } },
    );
    expect(result.recorded.size).toBe(2);
    expect(result.handedOver).toHaveLength(1);
    const [handed] = result.handedOver;
    expect(claimed.map((delivery) => delivery.id)).not.toContain(handed!.id);
    expect(handed).toMatchObject({ endpointId: endpoint.id, attemptCount: 0, url: receiver.url('/hand') });
    expect(handed!.secrets.map((sealed) => openSecret(TEST_KEYRING, endpoint.id, sealed))).toEqual([endpoint.secret]);
    expect(JSON.parse(handed!.body).type).toBe('post.published');
    expect(handed!.lease.startsWith('a:')).toBe(true);
    // A handed-over and a claimed delivery are objects of one shape, the same fields in the same order, so the
    // signing and sending path sees one shape (a spread in either cost the dispatcher ~14 % more CPU per delivery).
    expect(Object.keys(handed!)).toEqual(Object.keys(claimed[0]!));
    const rows = await deliveriesOf('org-hand');
    expect(rows.find((row) => row.id === handed!.id)?.lease_token).toBe(handed!.lease);
    // The cap (2) has one live attempt (the hand-over): a claim takes one more, no more.
    const more = await claimDeliveries(harness.db, {
      queued: [],
      chainEndpoints: [endpoint.id],
      endpointCap: 2,
      leaseMs: 60_000,
    });
    expect(more).toHaveLength(1);
    expect(more[0]!.id).not.toBe(handed!.id);
    // A claim never takes over a delivery a hand-over holds, even when it names it with its old q-lease.
    const stale = await claimDeliveries(harness.db, {
      queued: queued.filter((item) => item.deliveryId === handed!.id),
      endpointCap: 10,
      leaseMs: 60_000,
    });
    expect(stale).toEqual([]);
    expect((await deliveriesOf('org-hand')).find((row) => row.id === handed!.id)?.lease_token).toBe(handed!.lease);
  });

  it('never exceeds the per-endpoint cap, across concurrent claims with chaining', async () => {
    const endpoint = await harness.createEndpoint('org-cap', receiver.url('/cap'));
    await harness.publish('org-cap', 6);
    const { queued } = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    // Two dispatchers at once: one with the stream entries, one chaining on the same endpoint.
    const claims = await Promise.all([
      claimDeliveries(harness.db, { queued, endpointCap: 1, leaseMs: 60_000 }),
      claimDeliveries(harness.db, { queued: [], chainEndpoints: [endpoint.id], endpointCap: 1, leaseMs: 60_000 }),
      claimDeliveries(harness.db, { queued: [], chainEndpoints: [endpoint.id], endpointCap: 1, leaseMs: 60_000 }),
    ]);
    expect(claims.flat()).toHaveLength(1);
    const rows = await deliveriesOf('org-cap');
    expect(rows.filter((row) => row.lease_token?.startsWith('a:'))).toHaveLength(1);
    // The entries over the cap stay queued; a chain takes them (below) without waiting for the 60 s lease.
    expect(rows.filter((row) => row.lease_token?.startsWith('q:'))).toHaveLength(5);
    const [claimed] = claims.flat();
    await recordOutcomes(harness.db, [outcome(claimed!, { next: { status: 'SUCCEEDED' }, health: 'success' })], {
      disableAfterMs: DAY_MS,
    });
    const next = await claimDeliveries(harness.db, {
      queued: [],
      chainEndpoints: [endpoint.id],
      endpointCap: 1,
      leaseMs: 60_000,
    });
    expect(next).toHaveLength(1);
    expect(next[0]?.id).not.toBe(claimed?.id);
  });

  it('does not attempt a delivery moved into the future while the claim waited for its row', async () => {
    const { queued } = await endpointWithDeliveries('org-moved');
    const [item] = queued;
    let claim: Promise<unknown[]> | undefined;
    // The claim reads the delivery as due, then waits for its row while another writer (a pause, a
    // test setup, an operator) pushes it an hour ahead; the claim must see the row as it is now.
    await harness.db.transaction().execute(async (trx) => {
      await sql`select id from webhook_deliveries where id = ${item!.deliveryId} for update`.execute(trx);
      claim = claimDeliveries(harness.db, { queued, endpointCap: 10, leaseMs: 60_000 });
      await until(
        async () => {
          // (pg_stat_activity keeps the statement's first 1 KiB: its opening names it.)
          const { rows } = await sql<{ n: number }>`
            select count(*)::int as n from pg_stat_activity
            where wait_event_type = 'Lock' and query like '%herald_webhook_claim(%' and pid <> pg_backend_pid()`.execute(
            harness.db,
          );
          return rows[0]!.n;
        },
        (waiting) => waiting > 0,
      );
      await trx
        .updateTable('webhook_deliveries')
        .set({ next_attempt_at: new Date(Date.now() + 3_600_000), lease_token: null, leased_until: null })
        .where('id', '=', item!.deliveryId)
        .execute();
    });
    expect(await claim).toEqual([]);
    const [row] = await deliveriesOf('org-moved');
    expect(row).toMatchObject({ status: 'PENDING', lease_token: null });
  });

  it('keeps a replay made during an attempt: the late record does not overwrite it', async () => {
    await harness.createEndpoint('org-replay', receiver.url('/replay'));
    await harness.publish('org-replay');
    const { queued } = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const [claimed] = await claimDeliveries(harness.db, { queued, endpointCap: 10, leaseMs: 60_000 });
    await replayWebhookDelivery(harness.db, claimed!.id);
    const result = await recordOutcomes(harness.db, [outcome(claimed!, { next: { status: 'DEAD' } })], {
      disableAfterMs: DAY_MS,
    });
    expect(result.recorded.size).toBe(0);
    const [row] = await deliveriesOf('org-replay');
    expect(row).toMatchObject({ status: 'PENDING', lease_token: null, attempt_count: 0 });
    expect(row!.next_attempt_at!.getTime()).toBeLessThanOrEqual(Date.now() + 1_000);
    // The attempt itself is history all the same.
    const attempts = await harness.db
      .selectFrom('webhook_attempt_log')
      .selectAll()
      .where('delivery_id', '=', row!.id)
      .execute();
    expect(attempts).toHaveLength(1);
    // And the due scan hands the replayed delivery out again.
    expect(
      (await queueDueDeliveries(harness.db, { limit: 1_000, queueLeaseMs: 60_000 })).map((d) => d.deliveryId),
    ).toContain(row!.id);
  });
});

describe('attempts', () => {
  const succeeded = (delivery: { id: string; endpointId: string; lease: string }, at: Date, body: string) =>
    outcome(delivery, {
      at,
      statusCode: 200,
      durationMs: 7,
      error: null,
      responseBody: body,
      next: { status: 'SUCCEEDED' },
      health: 'success',
    });
  const rowsIn = async (table: 'webhook_attempts', deliveryId: string) =>
    harness.db.selectFrom(table).select('id').where('delivery_id', '=', deliveryId).execute();

  it('keep a success on its delivery row, list it after the failures, and move it into the attempts when it is replayed', async () => {
    const { endpoint, queued } = await endpointWithDeliveries('org-folded');
    const [first] = await claimDeliveries(harness.db, { queued, endpointCap: 10, leaseMs: 60_000 });
    const failedAt = new Date(Date.now() - 60_000);
    await recordOutcomes(harness.db, [outcome(first!, { at: failedAt, next: { status: 'PENDING', retryInMs: 0 } })], {
      disableAfterMs: DAY_MS,
    });
    const [again] = await claimDeliveries(harness.db, {
      queued: [],
      chainEndpoints: [endpoint.id],
      endpointCap: 10,
      leaseMs: 60_000,
    });
    expect(again!.id).toBe(first!.id);
    const okAt = new Date(Date.now() - 30_000);
    const recorded = await recordOutcomes(harness.db, [succeeded(again!, okAt, 'ok ✓')], { disableAfterMs: DAY_MS });
    expect(recorded.recorded.has(first!.id)).toBe(true);

    // The failure is a row of webhook_attempts; the success is on the delivery, in the same record.
    expect(await rowsIn('webhook_attempts', first!.id)).toHaveLength(1);
    const [row] = await deliveriesOf('org-folded');
    expect(row).toMatchObject({
      status: 'SUCCEEDED',
      attempt_count: 2,
      success_status_code: 200,
      success_duration_ms: 7,
      success_response_body: 'ok ✓',
    });
    expect(row!.succeeded_at!.getTime()).toBe(okAt.getTime());
    // Readers see both, in order (the API's loader).
    const history = async () =>
      (await createWebhookAttemptsLoader(harness.db).load(first!.id)).map((attempt) => [
        attempt.at.getTime(),
        attempt.status_code,
        attempt.error,
      ]);
    expect(await history()).toEqual([
      [failedAt.getTime(), 500, 'HTTP 500'],
      [okAt.getTime(), 200, null],
    ]);

    // A replay moves the success into webhook_attempts. Two at once (both waiting on the row held by
    // another transaction): the second finds it moved, and nothing is doubled.
    let replays: Promise<unknown> | undefined;
    await harness.db.transaction().execute(async (trx) => {
      await sql`select id from webhook_deliveries where id = ${first!.id} for update`.execute(trx);
      replays = Promise.all([
        replayWebhookDelivery(harness.db, first!.id),
        replayWebhookDelivery(harness.db, first!.id),
      ]);
      await until(
        async () => {
          // Both replays waiting for a lock (behind this transaction, or the second behind the first).
          const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
            where wait_event_type = 'Lock' and query like '%"moved"%'`.execute(harness.db);
          return rows[0]!.n;
        },
        (waiting) => waiting >= 2,
      );
    });
    await replays;
    expect(await rowsIn('webhook_attempts', first!.id)).toHaveLength(2);
    const [replayed] = await deliveriesOf('org-folded');
    expect(replayed).toMatchObject({ status: 'PENDING', succeeded_at: null, success_response_body: null });
    expect(await history()).toEqual([
      [failedAt.getTime(), 500, 'HTTP 500'],
      [okAt.getTime(), 200, null],
    ]);
    // Delivered again: three attempts, the new success last.
    const [third] = await claimDeliveries(harness.db, {
      queued: [],
      chainEndpoints: [endpoint.id],
      endpointCap: 10,
      leaseMs: 60_000,
    });
    const lastAt = new Date();
    await recordOutcomes(harness.db, [succeeded(third!, lastAt, 'again')], { disableAfterMs: DAY_MS });
    expect((await history()).map(([at]) => at)).toEqual([failedAt.getTime(), okAt.getTime(), lastAt.getTime()]);
  });

  it.each([
    ['the failure first', false],
    ['the success first', true],
  ])(
    'keep both outcomes of one delivery recorded in one batch (%s), the one the record applied and the other',
    async (_, successFirst) => {
      const orgId = `org-twice-${successFirst}`;
      const { queued } = await endpointWithDeliveries(orgId);
      const [claimed] = await claimDeliveries(harness.db, { queued, endpointCap: 10, leaseMs: 60_000 });
      const at = Date.now();
      const failure = outcome(claimed!, { at: new Date(at - 1_000), next: { status: 'PENDING', retryInMs: 60_000 } });
      const success = succeeded(claimed!, new Date(at), 'ok');
      await recordOutcomes(harness.db, successFirst ? [success, failure] : [failure, success], {
        disableAfterMs: DAY_MS,
      });
      const log = await createWebhookAttemptsLoader(harness.db).load(claimed!.id);
      expect(log.map((attempt) => attempt.status_code)).toEqual([500, 200]);
    },
  );

  it('keep a success recorded after its lease was lost as an attempt row, and leave the delivery as the replay made it', async () => {
    const { queued } = await endpointWithDeliveries('org-late-success');
    const [claimed] = await claimDeliveries(harness.db, { queued, endpointCap: 10, leaseMs: 60_000 });
    await replayWebhookDelivery(harness.db, claimed!.id);
    const result = await recordOutcomes(harness.db, [succeeded(claimed!, new Date(), 'late')], {
      disableAfterMs: DAY_MS,
    });
    expect(result.recorded.size).toBe(0);
    expect(await rowsIn('webhook_attempts', claimed!.id)).toHaveLength(1);
    const [row] = await deliveriesOf('org-late-success');
    expect(row).toMatchObject({ status: 'PENDING', succeeded_at: null });
    expect(await createWebhookAttemptsLoader(harness.db).load(claimed!.id)).toHaveLength(1);
  });
});

describe('slots', () => {
  const slotsOf = (endpointId: string) =>
    harness.db
      .selectFrom('webhook_endpoint_slots')
      .select(['lease', 'slots', 'leased_until'])
      .where('endpoint_id', '=', endpointId)
      .execute();
  const chain = (endpointId: string, lease?: string) =>
    claimDeliveries(harness.db, {
      queued: [],
      chainEndpoints: [endpointId],
      endpointCap: 3,
      leaseMs: 60_000,
      ...(lease ? { lease } : {}),
    });

  it('count a lane by its slots, not by the deliveries it holds ahead', async () => {
    const endpoint = await harness.createEndpoint('org-ahead', receiver.url('/ahead'));
    await harness.publish('org-ahead', 12);
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    // Lane A runs one slot and holds 6 more ahead (all a-leased to it).
    const lease = 'a:lane-a';
    const [first] = await claimDeliveries(harness.db, {
      queued: [],
      chainEndpoints: [endpoint.id],
      endpointCap: 1,
      leaseMs: 60_000,
      lease,
    });
    const ahead = await recordOutcomes(harness.db, [], {
      disableAfterMs: DAY_MS,
      handOver: { endpointId: endpoint.id, leaseMs: 60_000, lease, take: 6, slots: 1, keep: 1 },
    });
    expect(ahead.handedOver).toHaveLength(6);
    expect(ahead.slots).toBe(1);
    const rows = await deliveriesOf('org-ahead');
    expect(rows.filter((row) => row.lease_token === lease)).toHaveLength(7);
    // Another dispatcher (cap 3) finds two slots free, not none: held-ahead rows are not POSTs.
    const other = await chain(endpoint.id);
    expect(other).toHaveLength(2);
    expect(other.map((delivery) => delivery.id)).not.toContain(first!.id);
    expect((await slotsOf(endpoint.id)).map((slot) => slot.slots).sort()).toEqual([1, 2]);
    // Lane A's next record holds nothing more and has nothing in flight: its slot is given back at once.
    const done = await recordOutcomes(
      harness.db,
      [outcome(first!, { next: { status: 'SUCCEEDED' }, health: 'success' })],
      {
        disableAfterMs: DAY_MS,
        handOver: {
          endpointId: endpoint.id,
          leaseMs: 60_000,
          lease,
          take: 0,
          slots: 1,
          keep: 0,
          release: ahead.handedOver.map((d) => d.id),
        },
      },
    );
    expect(done.slots).toBe(0);
    // The freed slot goes at once, to a delivery lane A let go (no lease at all: a chain takes those too).
    const freed = await chain(endpoint.id);
    expect(freed).toHaveLength(1);
    expect(ahead.handedOver.map((delivery) => delivery.id)).toContain(freed[0]!.id);
    // Lane A's registration (0 slots: it ended) is dropped by that claim.
    expect((await slotsOf(endpoint.id)).map((slot) => slot.lease)).not.toContain(lease);
  });

  it("free a dead lane's slots once its registration has expired, and then drop it", async () => {
    const endpoint = await harness.createEndpoint('org-dead-lane', receiver.url('/dead-lane'));
    await harness.publish('org-dead-lane', 6);
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const claimed = await chain(endpoint.id, 'a:crashed');
    expect(claimed).toHaveLength(3);
    expect(await chain(endpoint.id)).toHaveLength(0);
    // The dispatcher died: nothing renews its registration, which runs out.
    await harness.db
      .updateTable('webhook_endpoint_slots')
      .set({ leased_until: new Date(Date.now() - 1_000) })
      .where('endpoint_id', '=', endpoint.id)
      .execute();
    const next = await chain(endpoint.id, 'a:next');
    expect(next).toHaveLength(3);
    expect(await slotsOf(endpoint.id)).toEqual([expect.objectContaining({ lease: 'a:next', slots: 3 })]);
    // Should the crashed lane only have stalled, its next record finds its slots gone (null): it must
    // start no more POSTs.
    const late = await recordOutcomes(
      harness.db,
      [outcome(claimed[0]!, { next: { status: 'SUCCEEDED' }, health: 'success' })],
      {
        disableAfterMs: DAY_MS,
        handOver: { endpointId: endpoint.id, leaseMs: 60_000, lease: 'a:crashed', take: 5, slots: 3, keep: 2 },
      },
    );
    expect(late.slots).toBeNull();
    expect(await slotsOf(endpoint.id)).toEqual([expect.objectContaining({ lease: 'a:next', slots: 3 })]);
    // A lapsed lane cannot grow back into slots someone else may have taken.
    expect(
      await growEndpointSlots(harness.db, { endpointId: endpoint.id, lease: 'a:crashed', want: 3, endpointCap: 3 }),
    ).toEqual({ slots: null, others: 3 });
  });

  it('never wait for a record holding a registration, and count a lapsed one that is being renewed', async () => {
    const endpoint = await harness.createEndpoint('org-slot-locks', receiver.url('/slot-locks'));
    await harness.publish('org-slot-locks', 6);
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const register = (lease: string, slots: number, msFromNow: number) =>
      harness.db
        .insertInto('webhook_endpoint_slots')
        .values({ endpoint_id: endpoint.id, lease, slots, leased_until: new Date(Date.now() + msFromNow) })
        .execute();
    await register('a:live', 1, 60_000);
    await register('a:lapsing', 2, -1_000);
    // Another lane's record is renewing both right now: it holds their rows (as a record does, after
    // locking its deliveries) until it commits.
    let commit!: (renewed: boolean) => void;
    let locked!: () => void;
    const held = new Promise<void>((resolve) => {
      locked = resolve;
    });
    const record = harness.db.transaction().execute(async (trx) => {
      await sql`select 1 from webhook_endpoint_slots where endpoint_id = ${endpoint.id} for update`.execute(trx);
      locked();
      if (await new Promise<boolean>((resolve) => (commit = resolve))) {
        await sql`update webhook_endpoint_slots set leased_until = now() + interval '1 minute'
            where endpoint_id = ${endpoint.id}`.execute(trx);
      }
    });
    await held;
    // The claim neither waits (it would until the record commits) nor takes the lapsing lane's slots.
    const during = await Promise.race([
      chain(endpoint.id, 'a:claimer'),
      new Promise<'blocked'>((resolve) => setTimeout(() => resolve('blocked'), 10_000)),
    ]);
    commit(true);
    await record;
    expect(during).not.toBe('blocked');
    expect(during).toHaveLength(0);
    expect((await slotsOf(endpoint.id)).map((slot) => slot.lease).sort()).toEqual(['a:lapsing', 'a:live']);
    // Renewed in time, it still counts; once it lapses for good, the next claim drops it and takes its slots.
    expect(await chain(endpoint.id, 'a:claimer')).toHaveLength(0);
    await harness.db
      .updateTable('webhook_endpoint_slots')
      .set({ leased_until: new Date(Date.now() - 1_000) })
      .where('lease', '=', 'a:lapsing')
      .execute();
    expect(await chain(endpoint.id, 'a:claimer')).toHaveLength(2);
    expect((await slotsOf(endpoint.id)).map((slot) => slot.lease).sort()).toEqual(['a:claimer', 'a:live']);
  });

  it('refuse a hand-over that does not say which lane it is for, and change nothing', async () => {
    const endpoint = await harness.createEndpoint('org-no-lease', receiver.url('/no-lease'));
    await harness.publish('org-no-lease', 2);
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const claim = (lease: string, endpointCap: number) =>
      claimDeliveries(harness.db, { queued: [], chainEndpoints: [endpoint.id], endpointCap, leaseMs: 60_000, lease });
    const [first] = await claim('a:one', 1);
    const [second] = await claim('a:two', 2);
    const success = { next: { status: 'SUCCEEDED' as const }, health: 'success' as const };
    // Two lanes' outcomes and no lease: whose slots to keep is unknowable, so nothing is recorded.
    await expect(
      recordOutcomes(harness.db, [outcome(first!, success), outcome(second!, success)], {
        disableAfterMs: DAY_MS,
        handOver: { endpointId: endpoint.id, leaseMs: 60_000 },
      }),
    ).rejects.toThrow(/a hand-over needs the a-lease its slots are registered under/);
    await expect(
      recordOutcomes(harness.db, [], {
        disableAfterMs: DAY_MS,
        handOver: { endpointId: endpoint.id, leaseMs: 60_000 },
      }),
    ).rejects.toThrow(/pass handOver.lease/);
    const rows = await deliveriesOf('org-no-lease');
    expect(rows.map((row) => [row.status, row.attempt_count])).toEqual([
      ['PENDING', 0],
      ['PENDING', 0],
    ]);
    expect((await slotsOf(endpoint.id)).map((slot) => [slot.lease, slot.slots]).sort()).toEqual([
      ['a:one', 1],
      ['a:two', 1],
    ]);
  });

  it('are dropped by retention a minute after their lease, and not before', async () => {
    const endpoint = await harness.createEndpoint('org-slot-retention', receiver.url('/slot-retention'));
    const at = (msFromNow: number) => new Date(Date.now() + msFromNow);
    await harness.db
      .insertInto('webhook_endpoint_slots')
      .values([
        { endpoint_id: endpoint.id, lease: 'a:long-gone', slots: 2, leased_until: at(-120_000) },
        { endpoint_id: endpoint.id, lease: 'a:just-lapsed', slots: 2, leased_until: at(-5_000) },
        { endpoint_id: endpoint.id, lease: 'a:live', slots: 2, leased_until: at(60_000) },
      ])
      .execute();
    const retention = createRetention({ db: harness.db, logger, retentionMs: 30 * DAY_MS, intervalMs: 60_000 });
    const result = await retention.runOnce();
    expect(result.slots).toBeGreaterThanOrEqual(1);
    expect((await slotsOf(endpoint.id)).map((slot) => slot.lease).sort()).toEqual(['a:just-lapsed', 'a:live']);
  });

  it('grow to what the others leave, never lower, and a record lowers them to what the lane holds', async () => {
    const endpoint = await harness.createEndpoint('org-grow-slots', receiver.url('/grow-slots'));
    await harness.publish('org-grow-slots', 10);
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const mine = await claimDeliveries(harness.db, {
      queued: [],
      chainEndpoints: [endpoint.id],
      endpointCap: 1,
      leaseMs: 60_000,
      lease: 'a:mine',
    });
    expect(mine).toHaveLength(1);
    expect(await chain(endpoint.id, 'a:theirs')).toHaveLength(2);
    const grow = (want: number) =>
      growEndpointSlots(harness.db, { endpointId: endpoint.id, lease: 'a:mine', want, endpointCap: 5 });
    expect(await grow(10)).toEqual({ slots: 3, others: 2 });
    expect(await grow(1)).toEqual({ slots: 3, others: 2 });
    // A record with one delivery still in flight and none taken: one slot is all it needs.
    const recorded = await recordOutcomes(harness.db, [], {
      disableAfterMs: DAY_MS,
      handOver: { endpointId: endpoint.id, leaseMs: 60_000, lease: 'a:mine', take: 0, slots: 3, keep: 1 },
    });
    expect(recorded.slots).toBe(1);
    expect(await grow(10)).toEqual({ slots: 3, others: 2 });
  });

  it('are only read by a record between renewals: written when it lowers them or renews them, never otherwise', async () => {
    const endpoint = await harness.createEndpoint('org-read-slots', receiver.url('/read-slots'));
    await harness.publish('org-read-slots', 6);
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const lease = 'a:reader';
    const claimed = await claimDeliveries(harness.db, {
      queued: [],
      chainEndpoints: [endpoint.id],
      endpointCap: 3,
      leaseMs: 60_000,
      lease,
    });
    expect(claimed).toHaveLength(3);
    const version = async () => {
      const { rows } = await sql<{ xmin: string; slots: number; leased_until: Date }>`
        select xmin::text, slots, leased_until from webhook_endpoint_slots
        where endpoint_id = ${endpoint.id} and lease = ${lease}`.execute(harness.db);
      return rows[0]!;
    };
    const record = (done: typeof claimed, keep: number, renewSlots: boolean) =>
      recordOutcomes(
        harness.db,
        done.map((delivery) => outcome(delivery, { next: { status: 'SUCCEEDED' }, health: 'success' })),
        {
          disableAfterMs: DAY_MS,
          handOver: { endpointId: endpoint.id, leaseMs: 60_000, lease, take: 0, slots: 3, keep, renewSlots },
        },
      );
    const claimedRow = await version();
    // Nothing to lower (three still held) and no renewal: the row keeps its version, the slots are reported.
    const between = await record([], 3, false);
    expect(between.slots).toBe(3);
    expect(await version()).toEqual(claimedRow);
    // One recorded, two still held: lowered to two, in a new version, and renewed with it.
    const lowered = await record(claimed.slice(0, 1), 2, false);
    expect(lowered.slots).toBe(2);
    const loweredRow = await version();
    expect(loweredRow.slots).toBe(2);
    expect(loweredRow.xmin).not.toBe(claimedRow.xmin);
    // A renewal writes the row though nothing is lowered, and moves its lease.
    await sql`update webhook_endpoint_slots set leased_until = now() + interval '5 seconds'
      where endpoint_id = ${endpoint.id} and lease = ${lease}`.execute(harness.db);
    const renewed = await record([], 2, true);
    expect(renewed.slots).toBe(2);
    const renewedRow = await version();
    expect(renewedRow.leased_until.getTime() - Date.now()).toBeGreaterThan(30_000);
    // A registration that lapsed is lost either way: no slots for a lane that did not renew in time.
    await sql`update webhook_endpoint_slots set leased_until = now() - interval '1 second'
      where endpoint_id = ${endpoint.id} and lease = ${lease}`.execute(harness.db);
    expect((await record([], 2, false)).slots).toBeNull();
  });
});

describe('record and endpoint health', () => {
  it('disables at once on 410, writes webhook.endpoint.disabled for the other endpoints, and stores the answer', async () => {
    const gone = await harness.createEndpoint('org-410', receiver.url('/gone'));
    await harness.publish('org-410');
    const { queued } = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const [claimed] = await claimDeliveries(harness.db, { queued, endpointCap: 10, leaseMs: 60_000 });
    const result = await recordOutcomes(
      harness.db,
      [
        outcome(claimed!, {
          statusCode: 410,
          error: 'HTTP 410',
          next: { status: 'DEAD' },
          health: 'gone',
          responseBody: 'gone ✓',
        }),
      ],
      { disableAfterMs: DAY_MS },
    );
    expect(result.disabled).toEqual([{ endpointId: gone.id, reason: 'the receiver answered 410 Gone' }]);
    const endpoint = await harness.db
      .selectFrom('webhook_endpoints')
      .selectAll()
      .where('id', '=', gone.id)
      .executeTakeFirstOrThrow();
    expect(endpoint).toMatchObject({ status: 'DISABLED', disabled_reason: 'the receiver answered 410 Gone' });
    expect(endpoint.disabled_at).toBeInstanceOf(Date);
    const events = await harness.db
      .selectFrom('webhook_outbox')
      .selectAll()
      .where('org_id', '=', 'org-410')
      .where('type', '!=', 'post.published')
      .orderBy('type')
      .execute();
    expect(events.map((event) => [event.type, event.exclude_endpoint_id])).toEqual([
      ['webhook.delivery.dead', gone.id],
      ['webhook.endpoint.disabled', gone.id],
    ]);
    const disabledBody = JSON.parse(events[1]!.body);
    expect(Object.keys(disabledBody)).toEqual(['id', 'type', 'created', 'data']);
    expect(disabledBody).toMatchObject({
      id: events[1]!.id,
      type: 'webhook.endpoint.disabled',
      data: { endpointId: gone.id, url: receiver.url('/gone'), reason: 'the receiver answered 410 Gone' },
    });
    expect(JSON.parse(events[0]!.body).data).toEqual({
      deliveryId: claimed!.id,
      endpointId: gone.id,
      eventId: claimed!.eventId,
      eventType: 'post.published',
      attempts: 1,
      lastError: 'HTTP 410',
    });
    const [attempt] = await harness.db
      .selectFrom('webhook_attempt_log')
      .selectAll()
      .where('delivery_id', '=', claimed!.id)
      .execute();
    expect(attempt?.response_body).toBe('gone ✓');
  });

  it('disables an endpoint whose every attempt failed for WEBHOOK_DISABLE_AFTER, and not before', async () => {
    const failing = await harness.createEndpoint('org-streak', receiver.url('/streak'));
    await harness.publish('org-streak', 2);
    const { queued } = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const [first, second] = await claimDeliveries(harness.db, { queued, endpointCap: 10, leaseMs: 60_000 });
    const early = await recordOutcomes(harness.db, [outcome(first!, {})], { disableAfterMs: 400 });
    expect(early.disabled).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const late = await recordOutcomes(harness.db, [outcome(second!, {})], { disableAfterMs: 400 });
    expect(late.disabled).toEqual([{ endpointId: failing.id, reason: 'every attempt failed for 0 s' }]);
  });

  it('pauses on 429 with Retry-After without counting a failure, and a success ends a streak', async () => {
    const throttled = await harness.createEndpoint('org-429', receiver.url('/429'));
    await harness.publish('org-429', 2);
    const { queued } = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const [first, second] = await claimDeliveries(harness.db, { queued, endpointCap: 10, leaseMs: 60_000 });
    await recordOutcomes(harness.db, [outcome(first!, { statusCode: 429, health: 'throttled', pauseMs: 3_000 })], {
      disableAfterMs: DAY_MS,
    });
    const read = () =>
      harness.db.selectFrom('webhook_endpoints').selectAll().where('id', '=', throttled.id).executeTakeFirstOrThrow();
    const paused = await read();
    expect(paused.failing_since).toBeNull();
    expect(paused.paused_until!.getTime()).toBeGreaterThan(Date.now() + 2_000);
    // A due delivery of a paused endpoint is not claimed: it is moved to the end of the pause.
    await harness.publish('org-429');
    const more = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    expect(await claimDeliveries(harness.db, { queued: more.queued, endpointCap: 10, leaseMs: 60_000 })).toEqual([]);
    const moved = await harness.db
      .selectFrom('webhook_deliveries')
      .selectAll()
      .where('id', '=', more.queued[0]!.deliveryId)
      .executeTakeFirstOrThrow();
    expect(moved.next_attempt_at!.getTime()).toBe(paused.paused_until!.getTime());
    await recordOutcomes(harness.db, [outcome(second!, { next: { status: 'SUCCEEDED' }, health: 'success' })], {
      disableAfterMs: DAY_MS,
    });
    expect((await read()).status).toBe('ENABLED');
  });

  it('keeps at most 1 KiB of the answer, as valid UTF-8', async () => {
    const bytes = Buffer.concat([Buffer.from('a'.repeat(1_023)), Buffer.from('é'), Buffer.from('tail')]);
    const body = Object.assign(
      (async function* () {
        yield bytes.subarray(0, 500);
        yield bytes.subarray(500);
      })(),
      { destroy() {} },
    );
    const kept = await readResponseStart(body, new AbortController().signal);
    // The two-byte é straddles the 1,024th byte: it is dropped, not cut in half.
    expect(kept).toBe('a'.repeat(1_023));
    const nul = Object.assign(
      (async function* () {
        yield Buffer.from('ok\u0000!');
      })(),
      { destroy() {} },
    );
    expect(await readResponseStart(nul, new AbortController().signal)).toBe('ok!');
  });
});

describe('dead letters and poison entries', () => {
  it('loses nothing when the dead-letter stream cannot be written: it is written later', async () => {
    const endpoint = await harness.createEndpoint('org-dlq', receiver.url('/dlq'));
    await harness.publish('org-dlq');
    const { queued } = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const [claimed] = await claimDeliveries(harness.db, { queued, endpointCap: 10, leaseMs: 60_000 });
    await recordOutcomes(harness.db, [outcome(claimed!, { next: { status: 'DEAD' } })], { disableAfterMs: DAY_MS });
    await harness.db
      .updateTable('webhook_deliveries')
      .set({ updated_at: new Date(Date.now() - 10_000) })
      .where('id', '=', claimed!.id)
      .execute();
    const broken = { ...harness.newQueue(), deadLetter: () => Promise.reject(new Error('READONLY')) } as WebhookQueue;
    await expect(streamMissedDeadLetters(harness.db, broken)).rejects.toThrow('READONLY');
    const row = () =>
      harness.db.selectFrom('webhook_deliveries').selectAll().where('id', '=', claimed!.id).executeTakeFirstOrThrow();
    expect((await row()).dead_letter_streamed_at).toBeNull();

    expect(await streamMissedDeadLetters(harness.db, harness.newQueue())).toBeGreaterThanOrEqual(1);
    expect((await row()).dead_letter_streamed_at).toBeInstanceOf(Date);
    const stream = await harness.redis.xrange(harness.keys.deadLetterStream, '-', '+');
    expect(stream.filter(([, fields]) => fields.includes(claimed!.id))).toHaveLength(1);
    expect(stream.find(([, fields]) => fields.includes(claimed!.id))?.[1]).toContain(endpoint.id);
  });

  it(`parks an entry that keeps failing after ${MAX_ENTRY_RECEIVES} receives`, async () => {
    const queue = harness.newQueue();
    await queue.init();
    await queue.enqueue([{ kind: 'delivery', deliveryIds: ['del_poison'], endpointId: 'we_poison', lease: 'q:x' }]);
    let handled = 0;
    const consumer = createConsumer({
      queue,
      consumerName: 'poison-test',
      concurrency: 10,
      reclaimIdleMs: 40,
      blockMs: 50,
      logger,
      async handle() {
        handled++;
        throw new Error('always fails');
      },
    });
    consumer.start();
    try {
      const parked = await until(
        () => harness.redis.xrange(harness.keys.parkedStream, '-', '+'),
        (entries) => entries.length > 0,
      );
      expect(parked[0]?.[1]).toEqual(expect.arrayContaining(['deliveryIds', 'del_poison']));
      expect(handled).toBe(MAX_ENTRY_RECEIVES);
      // Parking copies the entry, then acknowledges it: it leaves the pending list.
      const pending = await until(
        async () =>
          ((await harness.redis.xpending(harness.keys.workStream, harness.keys.consumerGroup)) as [number])[0],
        (count) => count === 0,
        5_000,
      );
      expect(pending).toBe(0);
    } finally {
      await consumer.stop();
    }
  });
});

describe('retention', () => {
  it('deletes old succeeded and skipped deliveries, their attempts and unreferenced outbox rows; keeps DEAD and recent ones', async () => {
    await harness.createEndpoint('org-ret', receiver.url('/ret'));
    await harness.publish('org-ret', 4);
    const { queued } = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const claimed = await claimDeliveries(harness.db, { queued, endpointCap: 10, leaseMs: 60_000 });
    const [oldOk, oldDead, recentOk, oldPending] = claimed;
    await recordOutcomes(
      harness.db,
      [
        outcome(oldOk!, { next: { status: 'SUCCEEDED' }, health: 'success' }),
        outcome(oldDead!, { next: { status: 'DEAD' } }),
        outcome(recentOk!, { next: { status: 'SUCCEEDED' }, health: 'success' }),
        outcome(oldPending!, {}),
      ],
      { disableAfterMs: DAY_MS },
    );
    const old = new Date(Date.now() - 40 * DAY_MS);
    const oldIds = [oldOk!.id, oldDead!.id, oldPending!.id];
    await harness.db.updateTable('webhook_deliveries').set({ updated_at: old }).where('id', 'in', oldIds).execute();
    await sql`update webhook_outbox set created_at = ${old} where org_id = 'org-ret'`.execute(harness.db);
    // The subscription history took these events long ago (its own marker; see the next test).
    await sql`update webhook_outbox set historied_at = ${old} where org_id = 'org-ret'`.execute(harness.db);

    const retention = createRetention({ db: harness.db, logger, retentionMs: 30 * DAY_MS, intervalMs: 60_000 });
    const result = await retention.runOnce();
    expect(result.ran).toBe(true);
    const left = await deliveriesOf('org-ret');
    expect(left.map((row) => row.id).sort()).toEqual([oldDead!.id, recentOk!.id, oldPending!.id].sort());
    const attempts = await harness.db
      .selectFrom('webhook_attempt_log')
      .select('delivery_id')
      .where('delivery_id', '=', oldOk!.id)
      .execute();
    expect(attempts).toEqual([]);
    const events = await harness.db
      .selectFrom('webhook_outbox')
      .select('id')
      .where('org_id', '=', 'org-ret')
      .where('type', '=', 'post.published')
      .execute();
    // Only the event whose one delivery was deleted goes; the others are still referenced.
    expect(events.map((event) => event.id).sort()).toEqual(
      [oldDead!.eventId, recentOk!.eventId, oldPending!.eventId].sort(),
    );

    // Another process holding the lock: this pass does nothing.
    await harness.db.transaction().execute(async (trx) => {
      await sql`select pg_advisory_xact_lock(hashtext(current_schema() || ':herald-webhook-retention'))`.execute(trx);
      const elsewhere = createRetention({
        db: harness.db,
        logger,
        retentionMs: 30 * DAY_MS,
        intervalMs: 60_000,
      });
      expect((await elsewhere.runOnce()).ran).toBe(false);
    });
  });
});

describe('retention and FIFO lines', () => {
  it('makes due what still waits in the line of an endpoint no longer FIFO, and leaves a FIFO line alone', async () => {
    const stranded = await harness.createEndpoint('org-line-left', receiver.url('/line-left'));
    const ordered = await harness.createEndpoint('org-line-kept', receiver.url('/line-kept'));
    await harness.db
      .updateTable('webhook_endpoints')
      .set({ ordering: 'FIFO' })
      .where('id', 'in', [stranded.id, ordered.id])
      .execute();
    await harness.publish('org-line-left', 3);
    await harness.publish('org-line-kept', 3);
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    // What a fan-out that read FIFO leaves when it commits after the endpoint was turned unordered.
    await harness.db
      .updateTable('webhook_endpoints')
      .set({ ordering: 'UNORDERED' })
      .where('id', '=', stranded.id)
      .execute();
    const waiting = (orgId: string) =>
      harness.db
        .selectFrom('webhook_deliveries')
        .select('id')
        .where('org_id', '=', orgId)
        .where('status', '=', 'PENDING')
        .where('next_attempt_at', 'is', null)
        .execute();
    expect(await waiting('org-line-left')).toHaveLength(3);

    const retention = createRetention({ db: harness.db, logger, retentionMs: 30 * DAY_MS, intervalMs: 60_000 });
    const result = await retention.runOnce();
    expect(result.released).toBe(3);
    expect(await waiting('org-line-left')).toHaveLength(0);
    expect(await waiting('org-line-kept')).toHaveLength(3);
  });
});

describe('turning a FIFO endpoint unordered', () => {
  it('does not deadlock with a dispatcher recording its head (delivery locked, then the endpoint)', async () => {
    const endpoint = await harness.createEndpoint('org-line-turn', receiver.url('/line-turn'));
    await harness.db.updateTable('webhook_endpoints').set({ ordering: 'FIFO' }).where('id', '=', endpoint.id).execute();
    await harness.publish('org-line-turn', 2);
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const [head] = await deliveriesOf('org-line-turn');
    let turning: Promise<unknown> | undefined;
    // A record's order: the delivery first, the endpoint's health after.
    await harness.db.transaction().execute(async (trx) => {
      await trx.updateTable('webhook_deliveries').set({ updated_at: new Date() }).where('id', '=', head!.id).execute();
      turning = setWebhookEndpointOrdering(harness.db, {
        id: endpoint.id,
        orgIds: ['org-line-turn'],
        ordering: 'UNORDERED',
      });
      await new Promise((resolve) => setTimeout(resolve, 300));
      await trx.updateTable('webhook_endpoints').set({ failing_since: null }).where('id', '=', endpoint.id).execute();
    });
    await expect(turning).resolves.toMatchObject({ id: endpoint.id, ordering: 'UNORDERED' });
    const rows = await deliveriesOf('org-line-turn');
    expect(rows.map((row) => row.next_attempt_at)).toEqual([expect.any(Date), expect.any(Date)]);
  });
});

describe('retention beside the subscription history', () => {
  it('keeps a post.published outbox event the history has not taken yet (historied_at null), and one not fanned out yet', async () => {
    await sql`alter table webhook_outbox add column if not exists historied_at timestamptz`.execute(harness.db);
    const old = new Date(Date.now() - 40 * DAY_MS);
    // Two recorded with nothing to fan out (dispatched at once), one still waiting for its fan-out.
    await sql`insert into webhook_outbox (id, org_id, type, body, created_at, dispatched_at) values
      ('evt_hist_pending', 'org-hist', 'post.published', '{}', ${old}, ${old}),
      ('evt_hist_taken', 'org-hist', 'post.published', '{}', ${old}, ${old})`.execute(harness.db);
    await sql`insert into webhook_outbox (id, org_id, type, body, created_at)
      values ('evt_hist_unfanned', 'org-hist', 'post.published', '{}', ${old})`.execute(harness.db);
    await sql`update webhook_outbox set historied_at = case when id = 'evt_hist_pending' then null else now() end
      where org_id = 'org-hist'`.execute(harness.db);
    const retention = createRetention({ db: harness.db, logger, retentionMs: 30 * DAY_MS, intervalMs: 60_000 });
    await retention.runOnce();
    const left = await harness.db
      .selectFrom('webhook_outbox')
      .select('id')
      .where('org_id', '=', 'org-hist')
      .orderBy('id')
      .execute();
    expect(left.map((row) => row.id)).toEqual(['evt_hist_pending', 'evt_hist_unfanned']);
    // Fanned out (no endpoint wants it), it goes at the next pass.
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    await retention.runOnce();
    const after = await harness.db.selectFrom('webhook_outbox').select('id').where('org_id', '=', 'org-hist').execute();
    expect(after.map((row) => row.id)).toEqual(['evt_hist_pending']);
  });
});

describe('deleting an endpoint', () => {
  it('is a soft delete; retention purges its deliveries, their attempts, the endpoint and its slot rows in the background', async () => {
    const { endpoint, queued } = await endpointWithDeliveries('org-del', 3);
    // One delivery attempted (an attempt row) and the lane's slot row left behind.
    const [tried] = await claimDeliveries(harness.db, {
      queued: queued.slice(0, 1),
      endpointCap: 10,
      leaseMs: 60_000,
    });
    await recordOutcomes(harness.db, [outcome(tried!, {})], { disableAfterMs: DAY_MS });
    const slotsOfEndpoint = () =>
      harness.db.selectFrom('webhook_endpoint_slots').select('lease').where('endpoint_id', '=', endpoint.id).execute();
    expect(await attemptIdsOf(tried!.id)).toHaveLength(1);
    await harness.db
      .insertInto('webhook_endpoint_slots')
      .values({
        endpoint_id: endpoint.id,
        lease: 'a:left-behind',
        slots: 1,
        leased_until: new Date(Date.now() + 60_000),
      })
      .execute();
    expect(await deleteWebhookEndpoint(harness.db, endpoint.id, ['org-del'])).toBe(true);
    expect(await findWebhookEndpointById(harness.db, endpoint.id)).toBeUndefined();
    expect(await deliveriesOf('org-del')).toHaveLength(3);
    // Published after the delete: no delivery at all.
    await harness.publish('org-del');
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    expect(await deliveriesOf('org-del')).toHaveLength(3);

    const retention = createRetention({ db: harness.db, logger, retentionMs: 30 * DAY_MS, intervalMs: 60_000 });
    const result = await retention.runOnce();
    expect(result).toMatchObject({ purgedDeliveries: 3, purgedEndpoints: 1 });
    expect(await deliveriesOf('org-del')).toEqual([]);
    expect(await attemptIdsOf(tried!.id)).toEqual([]);
    expect(await slotsOfEndpoint()).toEqual([]);
    const raw = await harness.db.selectFrom('webhook_endpoints').select('id').where('id', '=', endpoint.id).execute();
    expect(raw).toEqual([]);
  });
});

describe('an endpoint deleted by hand (no foreign key cascades its deliveries)', () => {
  it('leaves deliveries that the next claim naming them makes SKIPPED, not handed out again', async () => {
    const { endpoint, queued: mine } = await endpointWithDeliveries('org-hand-del', 2);
    expect(mine).toHaveLength(2);
    await sql`delete from webhook_endpoints where id = ${endpoint.id}`.execute(harness.db);
    const claimed = await claimDeliveries(harness.db, { queued: mine, endpointCap: 10, leaseMs: 60_000 });
    expect(claimed).toEqual([]);
    const rows = await deliveriesOf('org-hand-del');
    expect(rows.map((row) => [row.status, row.lease_token, row.next_attempt_at])).toEqual([
      ['SKIPPED', null, null],
      ['SKIPPED', null, null],
    ]);
  });

  it('a delivery whose outbox event was deleted is SKIPPED by a claim, and a hand-over that takes only such ones hands over nothing', async () => {
    const { endpoint, queued: mine } = await endpointWithDeliveries('org-hand-evt', 3);
    const [first, second, third] = await deliveriesOf('org-hand-evt');
    await sql`delete from webhook_outbox where id in (${second!.event_id}, ${third!.event_id})`.execute(harness.db);

    const lease = `a:${crypto.randomUUID()}`;
    const claimed = await claimDeliveries(harness.db, { queued: mine, endpointCap: 10, leaseMs: 60_000, lease });
    expect(claimed.map((delivery) => delivery.id)).toEqual([first!.id]);
    expect((await deliveriesOf('org-hand-evt')).map((row) => row.status)).toEqual(['PENDING', 'SKIPPED', 'SKIPPED']);

    // A new delivery whose event then goes: the lane's hand-over takes it (it cannot see the event is
    // gone without a look-up per row) but hands nothing over, and does not throw.
    await harness.publish('org-hand-evt');
    await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 1 });
    const fourth = (await deliveriesOf('org-hand-evt'))[3]!;
    await sql`delete from webhook_outbox where id = ${fourth.event_id}`.execute(harness.db);
    await sql`update webhook_deliveries set leased_until = now() - interval '1 second' where id = ${fourth.id}`.execute(
      harness.db,
    );
    const recorded = await recordOutcomes(
      harness.db,
      [outcome(claimed[0]!, { statusCode: 200, error: null, next: { status: 'SUCCEEDED' }, health: 'success' })],
      { disableAfterMs: DAY_MS, handOver: { endpointId: endpoint.id, leaseMs: 60_000, lease, take: 5 } },
    );
    expect(recorded.recorded).toEqual(new Set([first!.id]));
    expect(recorded.handedOver).toEqual([]);
  });

  it('DEAD deliveries of an endpoint deleted by hand neither stall the dead-letter catch-up nor stay after retention', async () => {
    const queue = harness.newQueue();
    // Earlier tests' dead letters count as streamed, whenever they died (the catch-up leaves the last two
    // seconds' alone, so a call here could leave one to come first below).
    await sql`update webhook_deliveries set dead_letter_streamed_at = now()
      where status = 'DEAD' and dead_letter_streamed_at is null`.execute(harness.db);
    const { endpoint: gone } = await endpointWithDeliveries('org-dead-gone');
    await endpointWithDeliveries('org-dead-kept');
    const [orphan] = await deliveriesOf('org-dead-gone');
    const [letter] = await deliveriesOf('org-dead-kept');
    await sql`update webhook_deliveries set status = 'DEAD', next_attempt_at = null, lease_token = null,
      leased_until = null, updated_at = now() - interval '1 minute', dead_letter_streamed_at = null
      where id in (${orphan!.id}, ${letter!.id})`.execute(harness.db);
    await sql`insert into webhook_attempts (delivery_id, at, status_code, duration_ms, error)
      values (${orphan!.id}, now(), 500, 5, 'HTTP 500')`.execute(harness.db);
    await sql`delete from webhook_endpoints where id = ${gone.id}`.execute(harness.db);

    // One at a time: the orphan (older) is marked, not streamed; the next pass streams the other one.
    expect(await streamMissedDeadLetters(harness.db, queue, 1)).toBe(0);
    expect(await streamMissedDeadLetters(harness.db, queue, 1)).toBe(1);
    const stream = await harness.redis.xrange(harness.keys.deadLetterStream, '-', '+');
    expect(stream.filter(([, fields]) => fields.includes(letter!.id))).toHaveLength(1);
    expect(stream.filter(([, fields]) => fields.includes(orphan!.id))).toHaveLength(0);

    const retention = createRetention({ db: harness.db, logger, retentionMs: 30 * DAY_MS, intervalMs: 60_000 });
    await retention.runOnce();
    expect(await deliveriesOf('org-dead-gone')).toEqual([]);
    expect(await attemptIdsOf(orphan!.id)).toEqual([]);
    // The one whose endpoint exists stays: retention keeps DEAD deliveries.
    expect((await deliveriesOf('org-dead-kept')).map((row) => row.status)).toEqual(['DEAD']);
  });
});

describe('purging a deleted endpoint', () => {
  it('waits for deliveries being attempted (their attempt rows come later) and purges them once recorded', async () => {
    const { endpoint, queued: mine } = await endpointWithDeliveries('org-purge-busy', 2);
    const [busy] = await claimDeliveries(harness.db, { queued: mine.slice(0, 1), endpointCap: 10, leaseMs: 60_000 });
    expect(await deleteWebhookEndpoint(harness.db, endpoint.id, ['org-purge-busy'])).toBe(true);

    const retention = createRetention({ db: harness.db, logger, retentionMs: 30 * DAY_MS, intervalMs: 60_000 });
    expect(await retention.runOnce()).toMatchObject({ purgedDeliveries: 1, purgedEndpoints: 0 });
    expect((await deliveriesOf('org-purge-busy')).map((row) => row.id)).toEqual([busy!.id]);

    await recordOutcomes(harness.db, [outcome(busy!, {})], { disableAfterMs: DAY_MS });
    expect(await attemptIdsOf(busy!.id)).toHaveLength(1);
    expect(await retention.runOnce()).toMatchObject({ purgedDeliveries: 1, purgedEndpoints: 1 });
    expect(await deliveriesOf('org-purge-busy')).toEqual([]);
    expect(await attemptIdsOf(busy!.id)).toEqual([]);
  });
});

// Dispatchers started by a test run until it ends: each test's endpoint cap is its own.
const running: Dispatcher[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((dispatcher) => dispatcher.stop()));
});

describe('cap across two running dispatchers', () => {
  it('has at most one request in flight to an endpoint with WEBHOOK_ENDPOINT_CONCURRENCY=1', async () => {
    const server = await startInFlightReceiver(() => 15);
    try {
      await harness.createEndpoint('org-cap1', `http://127.0.0.1:${server.port}/one`);
      running.push(await harness.startDispatcher({ endpointConcurrency: 1 }));
      running.push(await harness.startDispatcher({ endpointConcurrency: 1 }));
      await harness.publish('org-cap1', 20);
      await until(
        async () => server.answered,
        (count) => count >= 20,
        30_000,
      );
      expect(server.maxInFlight).toBe(1);
    } finally {
      server.close();
    }
  });

  it('has at most WEBHOOK_ENDPOINT_CONCURRENCY requests in flight while batches are recorded during the next POSTs', async () => {
    // Answers at once or after 1–3 ms, so records and the next batches' POSTs overlap all the time.
    const server = await startInFlightReceiver((answered) => answered % 4);
    try {
      await harness.createEndpoint('org-cap3', `http://127.0.0.1:${server.port}/three`);
      running.push(await harness.startDispatcher({ endpointConcurrency: 3 }));
      running.push(await harness.startDispatcher({ endpointConcurrency: 3 }));
      await harness.publish('org-cap3', 120);
      await until(
        async () => server.answered,
        (count) => count >= 120,
        60_000,
      );
      expect(server.maxInFlight).toBeLessThanOrEqual(3);
      expect(server.maxInFlight).toBeGreaterThan(1);
    } finally {
      server.close();
    }
  });
});

describe('continuous lanes', () => {
  it('grow to the cap when more work comes than their claim found', async () => {
    const server = await startInFlightReceiver(() => 150);
    try {
      await harness.createEndpoint('org-grow', `http://127.0.0.1:${server.port}/grow`);
      running.push(await harness.startDispatcher({ endpointConcurrency: 4, timeoutMs: 5_000 }));
      // The lane's claim finds one delivery: one slot. The rest arrive while it is in flight.
      await harness.publish('org-grow', 1);
      await until(
        async () => server.inFlight,
        (count) => count === 1,
      );
      await harness.publish('org-grow', 24);
      await until(
        async () => server.answered,
        (count) => count === 25,
      );
      expect(server.maxInFlight).toBe(4);
    } finally {
      server.close();
    }
  });

  it('let go of what they hold once the endpoint is disabled elsewhere', async () => {
    let disabling = false;
    receiver.behave(() => {
      // Disabled while the first attempt is in flight (as an operator or another dispatcher would).
      if (!disabling) {
        disabling = true;
        void harness.db
          .updateTable('webhook_endpoints')
          .set({ status: 'DISABLED' })
          .where('url', '=', receiver.url('/halt'))
          .execute();
      }
      return { status: 200, delayMs: 500 };
    }, '/halt');
    await harness.createEndpoint('org-halt', receiver.url('/halt'));
    const events = await harness.publish('org-halt', 12);
    // One slot: the lane holds 6 (1 claimed + 5 ahead) and would POST them all without looking.
    running.push(await harness.startDispatcher({ endpointConcurrency: 1, timeoutMs: 5_000 }));
    const settled = await until(
      async () => (await deliveriesOf('org-halt')).filter((d) => d.status === 'SUCCEEDED' || d.status === 'SKIPPED'),
      (rows) => rows.length === events.length,
    );
    const sent = receiver.requestsTo('/halt').length;
    expect(sent).toBeGreaterThanOrEqual(1);
    expect(sent).toBeLessThan(4);
    expect(settled.filter((d) => d.status === 'SUCCEEDED')).toHaveLength(sent);
  });

  it('renew the leases of what they hold ahead: a delivery held past its first lease is attempted once', async () => {
    // Timeout 1 s: leases of 2 s, a POST starts only within 0.5 s of the last renewal. With one slot and
    // 250 ms per answer, what the lane holds ahead waits ~1 s, and the whole run outlasts the lease.
    receiver.behave(() => ({ status: 200, delayMs: 250 }), '/renew');
    await harness.createEndpoint('org-renew', receiver.url('/renew'));
    const events = await harness.publish('org-renew', 12);
    running.push(await harness.startDispatcher({ endpointConcurrency: 1, timeoutMs: 1_000 }));
    await until(
      async () => (await deliveriesOf('org-renew')).filter((delivery) => delivery.status === 'SUCCEEDED').length,
      (count) => count === events.length,
    );
    expect(receiver.requestsTo('/renew').map((request) => request.headers['x-webhook-id'])).toHaveLength(events.length);
    const attempts = await harness.db
      .selectFrom('webhook_attempt_log')
      .innerJoin('webhook_deliveries', 'webhook_deliveries.id', 'webhook_attempt_log.delivery_id')
      .select('webhook_attempt_log.id')
      .where('webhook_deliveries.org_id', '=', 'org-renew')
      .execute();
    expect(attempts).toHaveLength(events.length);
  });

  it('go on POSTing what they hold while a record waits on the database, within the cap', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    const arrived: string[] = [];
    let answerFirst: (() => void) | undefined;
    let firstArrived!: () => void;
    const first = new Promise<void>((resolve) => {
      firstArrived = resolve;
    });
    const server = createServer((req, res) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      arrived.push(String(req.headers['x-webhook-id']));
      req.resume();
      const answer = () => {
        inFlight--;
        res.end('ok');
      };
      if (arrived.length === 1) {
        answerFirst = answer;
        firstArrived();
      } else setTimeout(answer, 5);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    let unlock: (() => void) | undefined;
    try {
      const { port } = server.address() as AddressInfo;
      await harness.createEndpoint('org-lanes', `http://127.0.0.1:${port}/lanes`);
      const events = await harness.publish('org-lanes', 10);
      running.push(await harness.startDispatcher({ endpointConcurrency: 1, timeoutMs: 10_000 }));
      await first;
      // Lock the first delivery's row while its POST is in flight: recording its outcome must wait.
      const unlocked = new Promise<void>((resolve) => {
        unlock = resolve;
      });
      let locked!: () => void;
      const isLocked = new Promise<void>((resolve) => {
        locked = resolve;
      });
      const holder = harness.db.transaction().execute(async (trx) => {
        await sql`select id from webhook_deliveries where event_id = ${arrived[0]} for update`.execute(trx);
        locked();
        await unlocked;
      });
      await isLocked;
      answerFirst?.();
      // A lane in batches would wait for that record; a continuous one POSTs the deliveries it holds.
      await until(
        async () => arrived.length,
        (count) => count >= 3,
      );
      const firstDelivery = await harness.db
        .selectFrom('webhook_deliveries')
        .select('status')
        .where('event_id', '=', arrived[0]!)
        .executeTakeFirstOrThrow();
      expect(firstDelivery.status).toBe('PENDING');
      unlock?.();
      await holder;
      await until(
        async () => (await deliveriesOf('org-lanes')).filter((delivery) => delivery.status === 'SUCCEEDED').length,
        (count) => count === events.length,
      );
      expect([...arrived].sort()).toEqual([...events].sort());
      expect(maxInFlight).toBe(1);
    } finally {
      unlock?.();
      server.close();
    }
  });
});

/**
 * A receiver that answers 200 after `delayMs(answered so far)` and counts the requests in flight at once,
 * for the cap tests (the shared test receiver answers through its own queue and cannot count overlap).
 */
async function startInFlightReceiver(delayMs: (answered: number) => number) {
  const stats = { port: 0, inFlight: 0, maxInFlight: 0, answered: 0, close: () => {} };
  const server = createServer((req, res) => {
    stats.inFlight++;
    stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
    req.resume();
    setTimeout(() => {
      stats.inFlight--;
      stats.answered++;
      res.end('ok');
    }, delayMs(stats.answered));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  stats.port = (server.address() as AddressInfo).port;
  stats.close = () => server.close();
  return stats;
}
