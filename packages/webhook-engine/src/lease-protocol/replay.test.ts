import { checkWebhookEventBody, newEventId, WEBHOOK_TEST_EVENT } from '@herald/contracts';
import { type Database, type HeraldDatabase, insertOutboxEvent, insertWebhookEndpoint } from '@herald/db';
import { testBackends, untilOrgOrderLockWaiter } from '@herald/db/testing';
import { TEST_KEYRING } from '@herald/testing';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { watchDeliveryUpdates } from '../testing/delivery-statements.js';
import { disableWebhookEndpoint } from './operational-events.js';
import { DEAD_LETTER_REPLAY_PAGE, replayDeadLetters, replayWebhookDelivery } from './replay.js';
import { insertTestWebhook } from './test-send.js';

// Dead-letter replays and the test send, on both backends (embedded mode runs them on PGlite). The
// dispatchers' side of a replay (a late record leaves it alone, a FIFO replay waits at the back of
// the line) is pinned in lease-protocol.test.ts and fifo-endpoints.test.ts.

const backends = testBackends(() => inject('databaseUrl'));

describe.each(backends)('replays and test sends on $name', ({ openMigrated }) => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;
  let counter = 0;

  beforeAll(async () => {
    ({ database, db } = await openMigrated());
  });

  afterAll(() => database.close());

  async function endpoint(ordering: 'FIFO' | 'UNORDERED' = 'UNORDERED') {
    counter += 1;
    const created = await insertWebhookEndpoint(db, {
      orgId: 'org-r',
      url: `https://example.com/${counter}`,
      eventTypes: ['post.published'],
      secret: `whsec_${counter}`,
      keyring: TEST_KEYRING,
    });
    if (ordering === 'FIFO') {
      await db.updateTable('webhook_endpoints').set({ ordering }).where('id', '=', created.id).execute();
    }
    return created;
  }

  /** `count` deliveries of `endpointId` in `status` (one statement), oldest first. */
  async function deliveries(endpointId: string, count: number, status = 'DEAD'): Promise<string[]> {
    counter += 1;
    const { rows } = await sql<{ id: string }>`
      insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, status, next_attempt_at,
        attempt_count, lease_token, leased_until, dead_letter_streamed_at)
      select 'del_r' || ${counter}::text || '_' || n, 'evt_r' || ${counter}::text || '_' || n, ${endpointId}, 'org-r',
        'post.published', ${status}, null, 3, ${status === 'DEAD' ? null : 'a:late'},
        ${status === 'DEAD' ? null : sql`now() + interval '1 minute'`}, ${status === 'DEAD' ? sql`now()` : null}
      from generate_series(1, ${count}) n order by n
      returning id`.execute(db);
    return rows.map((row) => row.id);
  }

  async function statuses(ids: readonly string[]) {
    return db
      .selectFrom('webhook_deliveries')
      .select(['id', 'status', 'next_attempt_at', 'fifo_seq', 'lease_token', 'dead_letter_streamed_at', 'seq'])
      .where('id', 'in', [...ids])
      .orderBy('seq')
      .execute();
  }

  it('replays only the DEAD deliveries of one endpoint, due now, lease and streamed mark cleared', async () => {
    const [target, other] = [await endpoint(), await endpoint()];
    const dead = await deliveries(target.id, 2);
    const held = await deliveries(target.id, 1, 'SUCCEEDED');
    const elsewhere = await deliveries(other.id, 1);
    expect(await replayDeadLetters(db, { all: true, endpointId: target.id })).toBe(2);
    const rows = await statuses(dead);
    expect(rows.map((row) => row.status)).toEqual(['PENDING', 'PENDING']);
    expect(rows.every((row) => row.next_attempt_at !== null && row.fifo_seq === null)).toBe(true);
    expect(rows.every((row) => row.lease_token === null && row.dead_letter_streamed_at === null)).toBe(true);
    expect((await statuses([...held, ...elsewhere])).map((row) => row.status)).toEqual(['SUCCEEDED', 'DEAD']);
    expect(await replayDeadLetters(db, { all: true, endpointId: target.id })).toBe(0);
  });

  it(`cuts a replay of ${DEAD_LETTER_REPLAY_PAGE * 2 + 200} dead letters into statements of at most ${DEAD_LETTER_REPLAY_PAGE} rows, each its own transaction`, async () => {
    const target = await endpoint();
    const dead = await deliveries(target.id, DEAD_LETTER_REPLAY_PAGE * 2 + 200);
    const watch = await watchDeliveryUpdates(db);
    try {
      const pages: string[][] = [];
      const replayed = await replayDeadLetters(
        db,
        { all: true, endpointId: target.id },
        {
          onPage: (ids) => {
            pages.push(ids);
          },
        },
      );
      expect(replayed).toBe(dead.length);
      const statements = await watch.statements();
      expect(statements.map((statement) => statement.rows)).toEqual([
        DEAD_LETTER_REPLAY_PAGE,
        DEAD_LETTER_REPLAY_PAGE,
        200,
      ]);
      expect(new Set(statements.map((statement) => statement.txid)).size).toBe(3);
      // Oldest first, every one once.
      expect(pages.flat()).toEqual(dead);
      expect((await statuses(dead)).every((row) => row.status === 'PENDING')).toBe(true);
    } finally {
      await watch.stop();
    }
  });

  it('replays the ids it is given in pages of pageSize, leaving those that are not DEAD alone', async () => {
    const target = await endpoint();
    const dead = await deliveries(target.id, 5);
    const pending = await deliveries(target.id, 1, 'PENDING');
    const watch = await watchDeliveryUpdates(db);
    try {
      const ids = [...dead, ...pending, 'del_unknown'];
      expect(await replayDeadLetters(db, { ids }, { pageSize: 3 })).toBe(5);
      expect((await watch.statements()).map((statement) => statement.rows)).toEqual([3, 2, 0]);
    } finally {
      await watch.stop();
    }
    // The PENDING one (a-leased: being attempted) keeps its lease: it was not replayed.
    expect((await statuses(pending))[0]).toMatchObject({ status: 'PENDING', lease_token: 'a:late' });
  });

  it("puts a FIFO endpoint's replayed dead letters at the back of its line, oldest first, across pages", async () => {
    const target = await endpoint('FIFO');
    const dead = await deliveries(target.id, 5);
    // One delivery already waiting in the line.
    const [waiting] = await deliveries(target.id, 1, 'PENDING');
    await sql`update webhook_deliveries set fifo_seq = nextval(pg_get_serial_sequence('webhook_outbox', 'seq')),
      lease_token = null, leased_until = null where id = ${waiting}`.execute(db);
    expect(await replayDeadLetters(db, { all: true, endpointId: target.id }, { pageSize: 2 })).toBe(5);
    const [line] = await statuses([waiting!]);
    const rows = await statuses(dead);
    expect(rows.every((row) => row.status === 'PENDING' && row.next_attempt_at === null)).toBe(true);
    const places = rows.map((row) => BigInt(row.fifo_seq ?? 0));
    expect(places.every((place) => place > BigInt(line?.fifo_seq ?? Number.MAX_SAFE_INTEGER))).toBe(true);
    expect([...places].sort((a, b) => (a < b ? -1 : 1))).toEqual(places);
  });

  it('ends: a dead letter that dies again while the replay runs is not replayed again', async () => {
    const target = await endpoint();
    const dead = await deliveries(target.id, 7);
    let pages = 0;
    const replayed = await replayDeadLetters(
      db,
      { all: true, endpointId: target.id },
      {
        pageSize: 3,
        onPage: async (ids) => {
          pages += 1;
          // Each page dies again at once (a receiver still broken).
          await db.updateTable('webhook_deliveries').set({ status: 'DEAD' }).where('id', 'in', ids).execute();
        },
      },
    );
    expect({ replayed, pages }).toEqual({ replayed: 7, pages: 3 });
    expect((await statuses(dead)).every((row) => row.status === 'DEAD')).toBe(true);
  });

  it('records a test event for one endpoint with its delivery, SKIPPED when the endpoint is disabled', async () => {
    const target = await endpoint();
    const delivery = await insertTestWebhook(db, target);
    expect(delivery).toMatchObject({ endpoint_id: target.id, event_type: WEBHOOK_TEST_EVENT, status: 'PENDING' });
    expect(delivery.next_attempt_at).not.toBeNull();
    const event = await db
      .selectFrom('webhook_outbox')
      .selectAll()
      .where('id', '=', delivery.event_id)
      .executeTakeFirstOrThrow();
    expect(event).toMatchObject({ type: WEBHOOK_TEST_EVENT, target_endpoint_id: target.id, org_id: 'org-r' });
    expect(JSON.parse(event.body)).toMatchObject({ id: delivery.event_id, data: { endpointId: target.id } });
    expect(checkWebhookEventBody(WEBHOOK_TEST_EVENT, event.body)).toBeUndefined();

    await disableWebhookEndpoint(db, { id: target.id, orgIds: ['org-r'], reason: 'off' });
    expect(await insertTestWebhook(db, target)).toMatchObject({ status: 'SKIPPED', next_attempt_at: null });
  });
});

// A replay onto a FIFO endpoint takes its place in the line under the organisation's ordering lock, as the
// organisation's publishes do: a replay that starts while an event of the organisation is being written
// waits for its commit, and is placed after it. PostgreSQL only: it takes two connections.
describe('replays in commit order with the organisation ordering lock on PostgreSQL', () => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;
  let endpointId: string;
  let counter = 0;

  beforeAll(async () => {
    ({ database, db } = await backends.find((backend) => backend.name === 'PostgreSQL')!.openMigrated());
    endpointId = (
      await insertWebhookEndpoint(db, {
        orgId: 'org-replay-order',
        url: 'https://example.com/replay-order',
        eventTypes: ['post.published'],
        secret: 'whsec_replay_order',
        keyring: TEST_KEYRING,
        ordering: 'FIFO',
      })
    ).id;
  });

  afterAll(() => database.close());

  async function deadLetter(): Promise<string> {
    counter += 1;
    const id = `del_replay_order_${counter}`;
    await sql`
      insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, status, attempt_count)
      values (${id}, ${`evt_replay_order_${counter}`}, ${endpointId}, 'org-replay-order', 'post.published', 'DEAD', 3)
    `.execute(db);
    return id;
  }

  /** Runs `replay` while a transaction that recorded an event of the organisation is open; the event's seq and the replay's place. */
  async function behindAnOpenEvent(replay: () => Promise<unknown>, deliveryId: string) {
    let replaying: Promise<unknown> | undefined;
    let replayed = false;
    let eventSeq = 0;
    await db.transaction().execute(async (holder) => {
      const id = newEventId();
      await insertOutboxEvent(holder, {
        id,
        orgId: 'org-replay-order',
        type: WEBHOOK_TEST_EVENT,
        body: JSON.stringify({
          id,
          type: WEBHOOK_TEST_EVENT,
          created: new Date().toISOString(),
          data: { endpointId, message: 'written while the replay starts' },
        }),
      });
      eventSeq = Number(
        (await holder.selectFrom('webhook_outbox').select('seq').where('id', '=', id).executeTakeFirstOrThrow()).seq,
      );
      replaying = replay().then(() => {
        replayed = true;
      });
      expect(await untilOrgOrderLockWaiter(db, 'org-replay-order')).toBe(1);
      expect(replayed).toBe(false);
    });
    await replaying;
    const row = await db
      .selectFrom('webhook_deliveries')
      .select(['status', 'fifo_seq'])
      .where('id', '=', deliveryId)
      .executeTakeFirstOrThrow();
    return { eventSeq, status: row.status, place: Number(row.fifo_seq) };
  }

  it('a replay of one delivery waits for the open write and takes the place after it', async () => {
    const id = await deadLetter();
    const { eventSeq, status, place } = await behindAnOpenEvent(() => replayWebhookDelivery(db, id), id);
    expect(status).toBe('PENDING');
    expect(place).toBeGreaterThan(eventSeq);
  });

  it('a replay of dead letters by id does the same', async () => {
    const id = await deadLetter();
    const { eventSeq, status, place } = await behindAnOpenEvent(() => replayDeadLetters(db, { ids: [id] }), id);
    expect(status).toBe('PENDING');
    expect(place).toBeGreaterThan(eventSeq);
  });
});
