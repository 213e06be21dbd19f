import {
  checkWebhookEventBody,
  WEBHOOK_DELIVERY_DEAD_EVENT,
  WEBHOOK_ENDPOINT_DISABLED_EVENT,
  WEBHOOK_EVENT_ID_PREFIX,
} from '@herald/contracts';
import { type Database, type HeraldDatabase, insertWebhookEndpoint, takeOrgOrderLock } from '@herald/db';
import { testBackends } from '@herald/db/testing';
import { TEST_KEYRING } from '@herald/testing';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type AttemptOutcome, recordOutcomes } from '../lease-protocol.js';
import { attemptOutcome } from '../testing/outcomes.js';
import { disableWebhookEndpoint } from './operational-events.js';

// The events Herald writes beside its own changes of state, on both backends (embedded mode runs them
// on PGlite): an operator's disable and the engine's (410, a dead delivery) write one body each.

const backends = testBackends(() => inject('databaseUrl'));
const EVENT_ID = new RegExp(`^${WEBHOOK_EVENT_ID_PREFIX}[0-9a-f]{32}$`);

describe.each(backends)('operational events on $name', ({ openMigrated }) => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;
  let counter = 0;

  beforeAll(async () => {
    ({ database, db } = await openMigrated());
  });

  afterAll(() => database.close());

  async function endpoint(orgId: string) {
    counter += 1;
    return insertWebhookEndpoint(db, {
      orgId,
      url: `https://example.com/ops/${counter}`,
      eventTypes: ['post.published'],
      secret: `whsec_ops${counter}`,
      keyring: TEST_KEYRING,
    });
  }

  /** A delivery of `endpointId` being attempted under the a-lease `a:ops<n>`. */
  async function attempting(endpointId: string, orgId: string) {
    counter += 1;
    const delivery = { id: `del_ops${counter}`, eventId: `evt_ops${counter}`, lease: `a:ops${counter}` };
    await sql`
      insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, status, next_attempt_at,
        attempt_count, lease_token, leased_until)
      values (${delivery.id}, ${delivery.eventId}, ${endpointId}, ${orgId}, 'post.published', 'PENDING', now(), 2,
        ${delivery.lease}, now() + interval '1 minute')`.execute(db);
    return delivery;
  }

  async function eventsExcluding(endpointId: string) {
    return db
      .selectFrom('webhook_outbox')
      .select(['id', 'org_id', 'type', 'body'])
      .where('exclude_endpoint_id', '=', endpointId)
      .execute();
  }

  /** Records `outcomes` as a dispatcher would, an endpoint being disabled after a day of failures. */
  const record = (...outcomes: AttemptOutcome[]) => recordOutcomes(db, outcomes, { disableAfterMs: 86_400_000 });

  it("an operator's disable records one webhook.endpoint.disabled for the other endpoints, and none for a second disable or another organisation", async () => {
    const target = await endpoint('org-ops');
    expect(await disableWebhookEndpoint(db, { id: target.id, orgIds: ['org-else'], reason: 'x' })).toBeUndefined();
    expect(await eventsExcluding(target.id)).toEqual([]);

    const disabled = await disableWebhookEndpoint(db, { id: target.id, orgIds: ['org-ops'], reason: 'maintenance' });
    expect(disabled).toMatchObject({ id: target.id, status: 'DISABLED', disabled_reason: 'maintenance' });
    const again = await disableWebhookEndpoint(db, { id: target.id, orgIds: ['org-ops'], reason: 'again' });
    expect(again).toMatchObject({ status: 'DISABLED', disabled_reason: 'maintenance' });

    const [event, ...more] = await eventsExcluding(target.id);
    expect(more).toEqual([]);
    expect(event).toMatchObject({ org_id: 'org-ops', type: WEBHOOK_ENDPOINT_DISABLED_EVENT });
    expect(event!.id).toMatch(EVENT_ID);
    expect(checkWebhookEventBody(WEBHOOK_ENDPOINT_DISABLED_EVENT, event!.body)).toBeUndefined();
    const body = JSON.parse(event!.body);
    expect(body).toMatchObject({
      id: event!.id,
      type: WEBHOOK_ENDPOINT_DISABLED_EVENT,
      data: { endpointId: target.id, url: target.url, reason: 'maintenance' },
    });
    expect(new Date(body.data.disabledAt).getTime()).toBe(disabled!.disabled_at!.getTime());
    expect(body.created).toBe(body.data.disabledAt);
  });

  it("the engine's disable (410) and dead letter write the same shapes, with ids from newEventId", async () => {
    const manual = await endpoint('org-eng');
    const gone = await endpoint('org-eng');
    await disableWebhookEndpoint(db, { id: manual.id, orgIds: ['org-eng'], reason: 'by hand' });
    const delivery = await attempting(gone.id, 'org-eng');
    const result = await record(
      attemptOutcome(
        { ...delivery, endpointId: gone.id, attemptCount: 2, url: gone.url },
        { statusCode: 410, error: 'HTTP 410', next: { status: 'DEAD' }, health: 'gone' },
      ),
    );
    expect(result.disabled).toEqual([{ endpointId: gone.id, reason: 'the receiver answered 410 Gone' }]);
    expect(result.events).toBe(2);

    const [byHand] = await eventsExcluding(manual.id);
    const [byEngine, dead, ...more] = await db
      .selectFrom('webhook_outbox')
      .select(['id', 'type', 'body'])
      .where('exclude_endpoint_id', '=', gone.id)
      .orderBy('type', 'desc')
      .execute();
    expect(more).toEqual([]);
    expect(byEngine!.type).toBe(WEBHOOK_ENDPOINT_DISABLED_EVENT);
    expect(dead!.type).toBe(WEBHOOK_DELIVERY_DEAD_EVENT);
    for (const event of [byHand!, byEngine!, dead!]) {
      expect(event.id).toMatch(EVENT_ID);
      expect(JSON.parse(event.body).id).toBe(event.id);
      expect(checkWebhookEventBody(event.type, event.body)).toBeUndefined();
    }
    expect(byEngine!.id).not.toBe(dead!.id);
    const shape = (body: string) => {
      const parsed = JSON.parse(body);
      return [Object.keys(parsed), Object.keys(parsed.data)];
    };
    expect(shape(byEngine!.body)).toEqual(shape(byHand!.body));
    expect(JSON.parse(byEngine!.body).data).toMatchObject({
      endpointId: gone.id,
      url: gone.url,
      reason: 'the receiver answered 410 Gone',
    });
    expect(JSON.parse(dead!.body).data).toEqual({
      deliveryId: delivery.id,
      endpointId: gone.id,
      eventId: delivery.eventId,
      eventType: 'post.published',
      attempts: 3,
      lastError: 'HTTP 410',
    });
  });

  // Each body is built in application code and checked against the catalog before the record's
  // statement; one that does not match (a bug: here, fed a value no real attempt has) is not written,
  // the change it describes stands, and the record reports it for the dispatcher to log and count.
  it('a webhook.delivery.dead the catalog refuses is not written: the delivery is DEAD all the same, and the record reports it', async () => {
    const target = await endpoint('org-refused-dead');
    const delivery = await attempting(target.id, 'org-refused-dead');
    const result = await record(
      attemptOutcome(
        { ...delivery, endpointId: target.id, url: target.url },
        // `attempts` must be at least 1.
        { statusCode: 500, error: 'HTTP 500', next: { status: 'DEAD' }, health: 'failure', attempt: 0 },
      ),
    );
    expect(result.recorded).toEqual(new Set([delivery.id]));
    expect(result.events).toBe(0);
    expect(result.invalidEvents.map((error) => [error.type, error.problems.join('; ')])).toEqual([
      [WEBHOOK_DELIVERY_DEAD_EVENT, expect.stringContaining('/data/attempts')],
    ]);
    expect(result.invalidEvents[0]!.eventId).toMatch(EVENT_ID);
    const row = await db
      .selectFrom('webhook_deliveries')
      .select(['status', 'attempt_count'])
      .where('id', '=', delivery.id)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ status: 'DEAD', attempt_count: 3 });
    expect(await eventsExcluding(target.id)).toEqual([]);
  });

  it('a webhook.endpoint.disabled the catalog refuses is not written: the endpoint is disabled all the same, and the dead event beside it is written', async () => {
    const target = await endpoint('org-refused-disable');
    const delivery = await attempting(target.id, 'org-refused-disable');
    const result = await record(
      attemptOutcome(
        { ...delivery, endpointId: target.id },
        // No URL: the body misses a member its schema requires.
        {
          url: undefined as unknown as string,
          statusCode: 410,
          error: 'HTTP 410',
          next: { status: 'DEAD' },
          health: 'gone',
        },
      ),
    );
    expect(result.disabled).toEqual([{ endpointId: target.id, reason: 'the receiver answered 410 Gone' }]);
    expect(result.invalidEvents.map((error) => error.type)).toEqual([WEBHOOK_ENDPOINT_DISABLED_EVENT]);
    expect(result.events).toBe(1);
    const events = await eventsExcluding(target.id);
    expect(events.map((event) => event.type)).toEqual([WEBHOOK_DELIVERY_DEAD_EVENT]);
    const row = await db
      .selectFrom('webhook_endpoints')
      .select(['status', 'disabled_reason'])
      .where('id', '=', target.id)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ status: 'DISABLED', disabled_reason: 'the receiver answered 410 Gone' });
  });

  it('a refused event whose change did not stand (the delivery was taken over) is neither written nor reported', async () => {
    const target = await endpoint('org-refused-late');
    const delivery = await attempting(target.id, 'org-refused-late');
    const result = await record(
      attemptOutcome(
        { ...delivery, lease: 'a:someone-else', endpointId: target.id, url: target.url },
        { statusCode: 500, error: 'HTTP 500', next: { status: 'DEAD' }, health: 'failure', attempt: 0 },
      ),
    );
    expect(result.recorded.size).toBe(0);
    expect(result.invalidEvents).toEqual([]);
    expect(result.events).toBe(0);
    expect(await eventsExcluding(target.id)).toEqual([]);
  });

  it('a disable names the URL that answered 410 when a batch attempted two URLs of one endpoint (changed mid-flight)', async () => {
    const target = await endpoint('org-two-urls');
    const [first, gone, last] = [
      await attempting(target.id, 'org-two-urls'),
      await attempting(target.id, 'org-two-urls'),
      await attempting(target.id, 'org-two-urls'),
    ];
    const failed = (delivery: typeof first) =>
      attemptOutcome(
        { ...delivery, endpointId: target.id, url: 'https://example.com/before' },
        { statusCode: 500, error: 'HTTP 500', health: 'failure', next: { status: 'PENDING', retryInMs: 60_000 } },
      );
    const result = await record(
      failed(first),
      attemptOutcome(
        { ...gone, endpointId: target.id, url: 'https://example.com/after' },
        { statusCode: 410, error: 'HTTP 410', health: 'gone', next: { status: 'DEAD' } },
      ),
      failed(last),
    );
    expect(result.disabled).toEqual([{ endpointId: target.id, reason: 'the receiver answered 410 Gone' }]);
    const disabled = (await eventsExcluding(target.id)).find((event) => event.type === WEBHOOK_ENDPOINT_DISABLED_EVENT);
    expect(JSON.parse(disabled!.body).data.url).toBe('https://example.com/after');
  });

  it("the engine's disable after failing for too long names the URL attempted, and its disabledAt is the row's", async () => {
    const target = await endpoint('org-failing-long');
    await db
      .updateTable('webhook_endpoints')
      .set({ failing_since: sql<Date>`now() - interval '2 days'` })
      .where('id', '=', target.id)
      .execute();
    const delivery = await attempting(target.id, 'org-failing-long');
    const result = await record(
      // Attempted at the URL the endpoint had before a change made while the attempt was in flight.
      attemptOutcome(
        { ...delivery, endpointId: target.id, url: 'https://example.com/old' },
        { statusCode: 500, health: 'failure' },
      ),
    );
    expect(result.disabled).toEqual([{ endpointId: target.id, reason: 'every attempt failed for 86400 s' }]);
    expect(result.invalidEvents).toEqual([]);
    const [event, ...more] = await eventsExcluding(target.id);
    expect(more).toEqual([]);
    expect(checkWebhookEventBody(WEBHOOK_ENDPOINT_DISABLED_EVENT, event!.body)).toBeUndefined();
    const body = JSON.parse(event!.body);
    expect(body.data).toMatchObject({
      endpointId: target.id,
      url: 'https://example.com/old',
      reason: 'every attempt failed for 86400 s',
    });
    const row = await db
      .selectFrom('webhook_endpoints')
      .select('disabled_at')
      .where('id', '=', target.id)
      .executeTakeFirstOrThrow();
    expect(new Date(body.data.disabledAt).getTime()).toBe(row.disabled_at!.getTime());
    expect(body.created).toBe(body.data.disabledAt);
  });
});

// The events written while recording an outcome take no organisation ordering lock (docs/webhooks.md,
// "Ordered endpoints"): a dispatcher recording outcomes never waits for a tenant's open write, even of an
// organisation with a FIFO endpoint. PostgreSQL only: it takes two connections.
describe('operational events written by the record on PostgreSQL', () => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;

  beforeAll(async () => {
    ({ database, db } = await backends.find((backend) => backend.name === 'PostgreSQL')!.openMigrated());
  });

  afterAll(() => database.close());

  it("records a dead delivery and its webhook.delivery.dead while the organisation's ordering lock is held", async () => {
    const endpoint = await insertWebhookEndpoint(db, {
      orgId: 'org-ordered-ops',
      url: 'https://example.com/ordered-ops',
      eventTypes: ['post.published'],
      secret: 'whsec_ordered_ops',
      keyring: TEST_KEYRING,
      ordering: 'FIFO',
    });
    await sql`
      insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, status, next_attempt_at,
        attempt_count, lease_token, leased_until)
      values ('del_ordered_ops', 'evt_ordered_ops', ${endpoint.id}, 'org-ordered-ops', 'post.published', 'PENDING',
        now(), 2, 'a:ordered-ops', now() + interval '1 minute')`.execute(db);
    await db.transaction().execute(async (holder) => {
      await takeOrgOrderLock(holder, 'org-ordered-ops');
      const recorded = await Promise.race([
        recordOutcomes(
          db,
          [
            attemptOutcome(
              { id: 'del_ordered_ops', endpointId: endpoint.id, lease: 'a:ordered-ops', attemptCount: 2 },
              { statusCode: 500, error: 'HTTP 500', next: { status: 'DEAD' }, health: 'failure' },
            ),
          ],
          { disableAfterMs: 86_400_000 },
        ),
        // Were it to wait for the lock, it would wait for this transaction: the race ends it.
        new Promise<'waited'>((resolve) => setTimeout(() => resolve('waited'), 10_000)),
      ]);
      expect(recorded).not.toBe('waited');
      expect(recorded).toMatchObject({ events: 1 });
    });
    const [dead] = await db
      .selectFrom('webhook_outbox')
      .select(['type', 'org_id'])
      .where('exclude_endpoint_id', '=', endpoint.id)
      .execute();
    expect(dead).toEqual({ type: WEBHOOK_DELIVERY_DEAD_EVENT, org_id: 'org-ordered-ops' });
  });
});
