import {
  checkWebhookEventBody,
  newEventId,
  POST_PUBLISHED_EVENT,
  WEBHOOK_DELIVERY_DEAD_EVENT,
  WEBHOOK_ENDPOINT_DISABLED_EVENT,
  type WebhookEventFilter,
} from '@herald/contracts';
import {
  createDatabase,
  type Database,
  type HeraldDatabase,
  insertOutboxEvent,
  insertWebhookEndpoint,
  migrateToLatest,
} from '@herald/db';
import { TEST_KEYRING } from '@herald/testing';
import { generateWebhookSecret } from '@herald/webhooks';
import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { disableWebhookEndpoint, fanOutOutbox, insertTestWebhook } from './lease-protocol.js';
import { dispatcherWorld } from './testing/dispatcher-world.js';
import { startTestReceiver } from './testing/test-receiver.js';

// Endpoint filters evaluated by the fan-out statement, through a real dispatcher on PostgreSQL and
// Redis; the same statement on embedded PGlite; and the bodies of the events that statements build in
// SQL, checked against the event catalog.

const URGENT: WebhookEventFilter = { data: { tags: ['urgent'] } };

async function endpoint(
  db: Kysely<Database>,
  orgId: string,
  url: string,
  filter: WebhookEventFilter | null,
  eventTypes: string[] = [POST_PUBLISHED_EVENT],
) {
  return insertWebhookEndpoint(db, {
    orgId,
    url,
    eventTypes,
    secret: generateWebhookSecret(),
    keyring: TEST_KEYRING,
    filter,
  });
}

/** Records a post.published event of a post with these tags, as the publish statement shapes it. */
async function publishTagged(db: Kysely<Database>, orgId: string, tags: string[]): Promise<string> {
  const id = newEventId();
  const created = new Date().toISOString();
  const body = JSON.stringify({
    id,
    type: POST_PUBLISHED_EVENT,
    created,
    data: {
      id: `post-${id}`,
      orgId,
      title: tags.join(' ') || 'untagged',
      tags,
      status: 'PUBLISHED',
      publishedAt: created,
      author: { id: 'u1', name: 'Ada' },
    },
  });
  await insertOutboxEvent(db, { id, orgId, type: POST_PUBLISHED_EVENT, body });
  return id;
}

async function deliveredEvents(db: Kysely<Database>, endpointId: string) {
  const rows = await db
    .selectFrom('webhook_deliveries')
    .select(['event_id', 'status'])
    .where('endpoint_id', '=', endpointId)
    .orderBy('seq')
    .execute();
  return rows;
}

describe('endpoint filters through the dispatcher (PostgreSQL, Redis)', () => {
  const world = dispatcherWorld(startTestReceiver, { each: true });

  it('keeps the events whose body contains the filter, makes no delivery for the others, and sends tests anyway', async () => {
    const db = world.harness.db;
    const filtered = await endpoint(db, 'org-f', world.receiver.url('/urgent'), URGENT);
    const everything = await endpoint(db, 'org-f', world.receiver.url('/all'), null);
    const disabled = await endpoint(db, 'org-f', world.receiver.url('/disabled'), URGENT);
    await disableWebhookEndpoint(db, { id: disabled.id, orgIds: ['org-f'], reason: 'test' });

    const urgent = await publishTagged(db, 'org-f', ['finance', 'urgent']);
    const routine = await publishTagged(db, 'org-f', ['finance']);
    await world.harness.startDispatcher();
    await world.receiver.waitFor(
      () => world.receiver.requestsTo('/all').length === 2 && world.receiver.requestsTo('/urgent').length === 1,
    );

    const ids = (path: string) => world.receiver.requestsTo(path).map((request) => JSON.parse(request.body).id);
    expect(ids('/urgent')).toEqual([urgent]);
    expect(new Set(ids('/all'))).toEqual(new Set([urgent, routine]));
    // One fan-out statement made every endpoint's deliveries of an event: `routine` reached /all, so the
    // filtered endpoint's absence is final. Filtered out means no row at all, not even SKIPPED.
    expect((await deliveredEvents(db, filtered.id)).map((row) => row.event_id)).toEqual([urgent]);
    expect(await deliveredEvents(db, disabled.id)).toEqual([{ event_id: urgent, status: 'SKIPPED' }]);
    expect((await deliveredEvents(db, everything.id)).map((row) => row.event_id)).toEqual([urgent, routine]);

    // A test send goes to its endpoint whatever the filter.
    const test = await insertTestWebhook(db, filtered);
    await world.receiver.waitFor(() => world.receiver.requestsTo('/urgent').length === 2);
    expect(ids('/urgent')).toEqual([urgent, test.event_id]);
    expect(world.receiver.requests.some((request) => request.path === '/disabled')).toBe(false);
  });

  it('builds operational events whose bodies match the catalog, and sends them so', async () => {
    const db = world.harness.db;
    world.receiver.behave(() => ({ status: 410 }), '/gone');
    world.receiver.behave(() => ({ status: 500 }), '/failing');
    const ops = await endpoint(db, 'org-ops', world.receiver.url('/ops'), null, [
      WEBHOOK_ENDPOINT_DISABLED_EVENT,
      WEBHOOK_DELIVERY_DEAD_EVENT,
    ]);
    await endpoint(db, 'org-ops', world.receiver.url('/gone'), null);
    await endpoint(db, 'org-ops', world.receiver.url('/failing'), null);
    await publishTagged(db, 'org-ops', []);
    await world.harness.startDispatcher({ retryHorizonMs: 1_000 });
    const received = (type: string) =>
      world.receiver.requestsTo('/ops').filter((request) => JSON.parse(request.body).type === type);
    await world.receiver.waitFor(
      () => received(WEBHOOK_ENDPOINT_DISABLED_EVENT).length === 1 && received(WEBHOOK_DELIVERY_DEAD_EVENT).length >= 1,
      20_000,
    );
    for (const type of [WEBHOOK_ENDPOINT_DISABLED_EVENT, WEBHOOK_DELIVERY_DEAD_EVENT]) {
      const [request] = received(type);
      expect(checkWebhookEventBody(type, request!.body), type).toBeUndefined();
      const stored = await db.selectFrom('webhook_outbox').select('body').where('type', '=', type).execute();
      expect(stored.length).toBeGreaterThan(0);
      for (const row of stored) expect(checkWebhookEventBody(type, row.body), type).toBeUndefined();
    }
    expect(await deliveredEvents(db, ops.id)).not.toHaveLength(0);
  }, 30_000);
});

describe('the fan-out filter on embedded PGlite', () => {
  let database: HeraldDatabase;

  beforeAll(async () => {
    database = await createDatabase({ kind: 'embedded', dataDir: 'memory://' });
    await migrateToLatest(database.db);
  });

  afterAll(() => database?.close());

  it('makes deliveries only where the body contains the filter', async () => {
    const db = database.db;
    const byAuthor = await endpoint(db, 'org-p', 'https://example.com/a', { data: { author: { id: 'u1' } } });
    const other = await endpoint(db, 'org-p', 'https://example.com/b', { data: { author: { id: 'u2' } } });
    const urgent = await endpoint(db, 'org-p', 'https://example.com/c', URGENT);
    const event = await publishTagged(db, 'org-p', ['urgent']);
    const routine = await publishTagged(db, 'org-p', []);
    let fannedOut = 0;
    while (fannedOut < 2) fannedOut += (await fanOutOutbox(db, { limit: 10, queueLeaseMs: 60_000 })).events;
    expect((await deliveredEvents(db, byAuthor.id)).map((row) => row.event_id)).toEqual([event, routine]);
    expect(await deliveredEvents(db, other.id)).toEqual([]);
    expect((await deliveredEvents(db, urgent.id)).map((row) => row.event_id)).toEqual([event]);
  });
});
