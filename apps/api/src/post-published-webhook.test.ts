import { newEventId, WEBHOOK_TEST_EVENT } from '@herald/contracts';
import {
  type Database,
  deleteWebhookEndpoint,
  findPostById,
  type HeraldDatabase,
  insertOutboxEvent,
  insertPost,
  insertWebhookEndpoint,
  takeOrgOrderLock,
  upsertUser,
} from '@herald/db';
import { testBackends, untilOrgOrderLockWaiter } from '@herald/db/testing';
import { TEST_KEYRING, type TestSchema } from '@herald/testing';
import { createOutboxListener, disableWebhookEndpoint } from '@herald/webhook-engine';
import { type Kysely, sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { publishPostWithWebhook } from './post-published-webhook.js';

// publishPost's one statement: the post becomes PUBLISHED and its `post.published` outbox row exists in the
// same commit, exactly once, on PostgreSQL and on the embedded PGlite.

const backends = testBackends(() => inject('databaseUrl'));

describe.each(backends)('publishPostWithWebhook on $name', ({ name, openMigrated }) => {
  let database: HeraldDatabase;
  let schema: TestSchema | undefined;
  let db: Kysely<Database>;

  beforeAll(async () => {
    ({ database, schema, db } = await openMigrated());
  });

  afterAll(async () => {
    await database.close();
    await schema?.drop();
  });

  const outboxOf = (postId: string) =>
    db
      .selectFrom('webhook_outbox')
      .select(['org_id', 'type', 'body'])
      .execute()
      .then((rows) => rows.filter((row) => JSON.parse(row.body).data.id === postId));

  it('publishes a draft once with one post.published outbox row; a second publish changes nothing', async () => {
    await upsertUser(db, { id: 'pub', name: 'Pat' });
    const draft = await insertPost(db, { orgId: 'org-pub', authorId: 'pub', title: 'Draft', tags: ['x'] });
    const first = await publishPostWithWebhook(db, draft.id, ['org-pub']);
    expect(first?.published).toBe(true);
    expect(first?.post.status).toBe('PUBLISHED');
    expect(first?.post.published_at).toBeInstanceOf(Date);
    const second = await publishPostWithWebhook(db, draft.id, ['org-pub']);
    expect(second?.published).toBe(false);
    expect(second?.post.published_at).toEqual(first?.post.published_at);

    const rows = await outboxOf(draft.id);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ org_id: 'org-pub', type: 'post.published' });
    const event = JSON.parse(rows[0]!.body);
    expect(event).toMatchObject({
      type: 'post.published',
      data: {
        id: draft.id,
        orgId: 'org-pub',
        title: 'Draft',
        tags: ['x'],
        status: 'PUBLISHED',
        publishedAt: first?.post.published_at?.toISOString(),
        author: { id: 'pub', name: 'Pat' },
      },
    });
    expect(event.id).toMatch(/^evt_/);
  });

  it('finds nothing and changes nothing for a post outside the allowed organisations', async () => {
    await upsertUser(db, { id: 'pub2', name: 'P' });
    const draft = await insertPost(db, { orgId: 'org-b', authorId: 'pub2', title: 'B', tags: [] });
    expect(await publishPostWithWebhook(db, draft.id, ['org-a'])).toBeUndefined();
    expect(await publishPostWithWebhook(db, draft.id, [])).toBeUndefined();
    expect((await findPostById(db, draft.id))?.status).toBe('DRAFT');
    expect(await outboxOf(draft.id)).toEqual([]);
  });

  const endpointIn = (orgId: string, eventTypes = ['post.published']) =>
    insertWebhookEndpoint(db, {
      orgId,
      url: 'https://receiver.example/hook',
      eventTypes,
      secret: 'whsec_test',
      keyring: TEST_KEYRING,
    });
  const dispatchedAt = (eventId: string | undefined) =>
    db
      .selectFrom('webhook_outbox')
      .select('dispatched_at')
      .where('id', '=', eventId ?? '')
      .executeTakeFirstOrThrow()
      .then((row) => row.dispatched_at);
  /** Whether the event waits in the pending-fan-out queue. */
  const queued = async (eventId: string | undefined) =>
    (
      await db
        .selectFrom('webhook_outbox_pending as pending')
        .innerJoin('webhook_outbox as event', 'event.seq', 'pending.seq')
        .select('event.id')
        .where('event.id', '=', eventId ?? '')
        .execute()
    ).length === 1;

  it('records the event already dispatched when no endpoint of the organisation selects it, and queued for the fan-out otherwise', async () => {
    await upsertUser(db, { id: 'pub5', name: 'P' });
    const publish = async (orgId: string) => {
      const draft = await insertPost(db, { orgId, authorId: 'pub5', title: 'T', tags: [] });
      const publication = await publishPostWithWebhook(db, draft.id, [orgId]);
      expect(publication?.published).toBe(true);
      return {
        due: publication?.fanOutDue,
        dispatchedAt: await dispatchedAt(publication?.eventId),
        queued: await queued(publication?.eventId),
      };
    };
    // Nothing to fan out: no endpoint at all, one selecting other events only, one deleted.
    const nothingDue = { due: false, dispatchedAt: expect.any(Date), queued: false };
    expect(await publish('org-none')).toEqual(nothingDue);
    await endpointIn('org-other', ['webhook.delivery.dead']);
    expect(await publish('org-other')).toEqual(nothingDue);
    const deleted = await endpointIn('org-deleted');
    expect(await deleteWebhookEndpoint(db, deleted.id, ['org-deleted'])).toBe(true);
    expect(await publish('org-deleted')).toEqual(nothingDue);
    // Due: an endpoint selecting it, or a disabled one (its delivery is recorded SKIPPED).
    const due = { due: true, dispatchedAt: null, queued: true };
    await endpointIn('org-hooked');
    expect(await publish('org-hooked')).toEqual(due);
    const disabled = await endpointIn('org-disabled');
    await disableWebhookEndpoint(db, { id: disabled.id, orgIds: ['org-disabled'], reason: 'test' });
    expect(await publish('org-disabled')).toEqual(due);
  });

  it('records the event historied at once for an in-process history, unless it is handed to the relay', async () => {
    await upsertUser(db, { id: 'pub6', name: 'P' });
    // The history columns are the API's (the typed Database schema leaves them out).
    const marks = async (eventId: string | undefined) =>
      (
        await sql<{ historied_at: Date | null; history_handed_at: Date | null }>`
          select historied_at, history_handed_at from webhook_outbox where id = ${eventId ?? ''}`.execute(db)
      ).rows[0];
    const publish = async (title: string, historyInProcess?: boolean) => {
      const draft = await insertPost(db, { orgId: 'org-h', authorId: 'pub6', title, tags: [] });
      const publication = await publishPostWithWebhook(db, draft.id, ['org-h'], { historyInProcess });
      return { publication, row: await marks(publication?.eventId) };
    };
    // With Redis (the default): marked later, by the publisher's batch.
    const redis = await publish('later');
    expect(redis.row).toEqual({ historied_at: null, history_handed_at: null });
    // In process: marked by the statement, at the publication's time.
    const memory = await publish('now', true);
    expect(memory.publication?.handedToRelay).toBe(false);
    expect(memory.row?.historied_at).toEqual(memory.publication?.post.published_at);
    expect(memory.row?.history_handed_at).toBeNull();
    // An earlier event of the organisation is still with the relay: this one queues behind it, unmarked.
    await sql`update webhook_outbox set history_handed_at = now() where id = ${redis.publication?.eventId}`.execute(db);
    const queued = await publish('queued', true);
    expect(queued.publication?.handedToRelay).toBe(true);
    expect(queued.row?.historied_at).toBeNull();
    expect(queued.row?.history_handed_at).not.toBeNull();
  });

  // PGlite has one connection: publishes cannot overlap there.
  const concurrently = name === 'PostgreSQL' ? it : () => {};
  concurrently('of two concurrent publishes, exactly one announces the post', async () => {
    await upsertUser(db, { id: 'pub3', name: 'P' });
    const draft = await insertPost(db, { orgId: 'org-c', authorId: 'pub3', title: 'Race', tags: [] });
    const results = await Promise.all([
      publishPostWithWebhook(db, draft.id, ['org-c']),
      publishPostWithWebhook(db, draft.id, ['org-c']),
    ]);
    expect(results.map((result) => result?.published).sort()).toEqual([false, true]);
    expect(await outboxOf(draft.id)).toHaveLength(1);
  });

  concurrently(
    'sends the outbox NOTIFY when a fan-out is due, unless told not to (the caller wakes the dispatchers)',
    async () => {
      // The dispatchers' LISTEN connection, counting this schema's outbox notifications.
      let heard = 0;
      const listener = createOutboxListener({
        databaseUrl: schema!.url,
        logger: pino({ level: 'silent' }),
        onEvent: () => heard++,
      });
      await listener.start();
      try {
        const afterStart = heard; // one wake-up at start, for anything committed before
        await upsertUser(db, { id: 'pub4', name: 'P' });
        // Nothing due (no endpoint yet): no NOTIFY even when allowed.
        const unheard = await insertPost(db, { orgId: 'org-d', authorId: 'pub4', title: 'Unheard', tags: [] });
        expect((await publishPostWithWebhook(db, unheard.id, ['org-d']))?.fanOutDue).toBe(false);
        await endpointIn('org-d');
        const quiet = await insertPost(db, { orgId: 'org-d', authorId: 'pub4', title: 'Quiet', tags: [] });
        expect((await publishPostWithWebhook(db, quiet.id, ['org-d'], { notify: false }))?.published).toBe(true);
        expect(await outboxOf(quiet.id)).toHaveLength(1);
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect(heard).toBe(afterStart);
        const loud = await insertPost(db, { orgId: 'org-d', authorId: 'pub4', title: 'Loud', tags: [] });
        expect((await publishPostWithWebhook(db, loud.id, ['org-d']))?.published).toBe(true);
        const deadline = Date.now() + 5_000;
        while (heard === afterStart && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
        expect(heard).toBe(afterStart + 1);
      } finally {
        await listener.stop();
      }
    },
  );
});

// An organisation with an ordered (FIFO) endpoint gets its events in `seq` order, so its events must be
// numbered in the order they commit: a publish waits for the organisation's publish that drew an earlier
// number and has not committed yet. PostgreSQL only: it takes two connections.
describe('publishPostWithWebhook numbers events in commit order for an organisation with a FIFO endpoint', () => {
  let database: HeraldDatabase;
  let schema: TestSchema | undefined;
  let db: Kysely<Database>;

  beforeAll(async () => {
    ({ database, schema, db } = await backends.find((backend) => backend.name === 'PostgreSQL')!.openMigrated());
    await upsertUser(db, { id: 'orderer', name: 'O' });
    for (const [orgId, ordering] of [
      ['org-fifo', 'FIFO'],
      ['org-unordered', 'UNORDERED'],
    ] as const) {
      await insertWebhookEndpoint(db, {
        orgId,
        url: 'https://receiver.example/hook',
        eventTypes: ['post.published'],
        secret: 'whsec_test',
        keyring: TEST_KEYRING,
        ordering,
      });
    }
  });

  afterAll(async () => {
    await database.close();
    await schema?.drop();
  });

  const seqOf = async (eventId: string | undefined) =>
    Number(
      (
        await db
          .selectFrom('webhook_outbox')
          .select('seq')
          .where('id', '=', eventId ?? '')
          .executeTakeFirstOrThrow()
      ).seq,
    );
  /** Resolves once a transaction waits for `org-fifo`'s ordering lock (fails after 10 s). */
  const untilWaiting = async () => expect(await untilOrgOrderLockWaiter(db, 'org-fifo')).toBe(1);
  const draft = async (orgId: string, title: string) =>
    (await insertPost(db, { orgId, authorId: 'orderer', title, tags: [] })).id;

  it('a publish waits for the uncommitted one that drew an earlier number, and is numbered after it', async () => {
    const [first, second] = [await draft('org-fifo', 'first'), await draft('org-fifo', 'second')];
    let firstEventId: string | undefined;
    let secondDone = false;
    let publishing: Promise<string | undefined> | undefined;
    await db.transaction().execute(async (trx) => {
      firstEventId = (await publishPostWithWebhook(trx, first, ['org-fifo']))?.eventId;
      publishing = publishPostWithWebhook(db, second, ['org-fifo']).then((publication) => {
        secondDone = true;
        return publication?.eventId;
      });
      await untilWaiting();
      expect(secondDone).toBe(false);
    });
    const secondEventId = await publishing;
    expect(await seqOf(secondEventId)).toBeGreaterThan(await seqOf(firstEventId));
  });

  it('draws its number only once it holds the lock: what the holder records meanwhile is numbered first', async () => {
    const post = await draft('org-fifo', 'behind the holder');
    let publishing: Promise<string | undefined> | undefined;
    const holderEventId = newEventId();
    await db.transaction().execute(async (holder) => {
      await takeOrgOrderLock(holder, 'org-fifo');
      publishing = publishPostWithWebhook(db, post, ['org-fifo']).then((publication) => publication?.eventId);
      await untilWaiting();
      // Written after the publish started waiting: were the publish's number drawn before its wait,
      // this one would get the later number, and commit first.
      await insertOutboxEvent(holder, {
        id: holderEventId,
        orgId: 'org-fifo',
        type: WEBHOOK_TEST_EVENT,
        body: JSON.stringify({
          id: holderEventId,
          type: WEBHOOK_TEST_EVENT,
          created: new Date().toISOString(),
          data: { endpointId: 'we_holder', message: 'recorded by the holder' },
        }),
      });
    });
    expect(await seqOf(await publishing)).toBeGreaterThan(await seqOf(holderEventId));
  });

  it("an operator's disable waits for the lock too, and its webhook.endpoint.disabled is numbered after the holder's", async () => {
    const target = await insertWebhookEndpoint(db, {
      orgId: 'org-fifo',
      url: 'https://receiver.example/other',
      eventTypes: ['post.published'],
      secret: 'whsec_test',
      keyring: TEST_KEYRING,
    });
    const post = await draft('org-fifo', 'published by the holder');
    let holderEventId: string | undefined;
    let disabling: Promise<unknown> | undefined;
    let disabled = false;
    await db.transaction().execute(async (holder) => {
      holderEventId = (await publishPostWithWebhook(holder, post, ['org-fifo']))?.eventId;
      disabling = disableWebhookEndpoint(db, { id: target.id, orgIds: ['org-fifo'], reason: 'by hand' }).then(() => {
        disabled = true;
      });
      await untilWaiting();
      expect(disabled).toBe(false);
    });
    await disabling;
    const event = await db
      .selectFrom('webhook_outbox')
      .select('seq')
      .where('exclude_endpoint_id', '=', target.id)
      .executeTakeFirstOrThrow();
    expect(Number(event.seq)).toBeGreaterThan(await seqOf(holderEventId));
  });

  it('an organisation without a FIFO endpoint publishes without waiting for its uncommitted publish', async () => {
    const [first, second] = [await draft('org-unordered', 'first'), await draft('org-unordered', 'second')];
    await db.transaction().execute(async (trx) => {
      expect((await publishPostWithWebhook(trx, first, ['org-unordered']))?.published).toBe(true);
      // Answered while the first is still open: nothing waited. (Were it to wait, it would wait for
      // this transaction: the race ends it after 10 s, the rollback lets it go.)
      const published = await Promise.race([
        publishPostWithWebhook(db, second, ['org-unordered']).then((publication) => publication?.published),
        new Promise<'waited'>((resolve) => setTimeout(() => resolve('waited'), 10_000)),
      ]);
      expect(published).toBe(true);
    });
  });
});
