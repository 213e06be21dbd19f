import { randomUUID } from 'node:crypto';
import type { HistoryEntry } from '@herald/contracts';
import {
  createDatabase,
  type Database,
  type HeraldDatabase,
  insertPost,
  migrateToLatest,
  upsertUser,
} from '@herald/db';
import { createTestSchema, type TestSchema } from '@herald/testing';
import { startCuttableProxy } from '@herald/testing/cuttable-proxy';
import { freePort, waitFor } from '@herald/testing/ports';
import { Redis } from 'ioredis';
import { type Kysely, sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ownRedis } from '../../../../test/support/redis-server.js';
import { createApiMetrics } from '../metrics.js';
import { publishPostWithWebhook } from '../post-published-webhook.js';
import { createHistoryRelay } from './history-relay.js';
import { createPubSubService, type PubSubService } from './pubsub.js';

// publishPost appends its own event to the history right after its commit (no relay pass in the way),
// and every guarantee of the relay-only design still holds: answered ⇒ in the history; a publisher that
// can't reach Redis hands its event to the relay, and later publishes of its organisation queue behind
// it (an organisation's events keep their order); an event whose publisher died is appended by the
// relay; a relay racing a direct append puts the event in the history once. Real PostgreSQL + Redis,
// and embedded PGlite + memory.

const logger = pino({ level: 'silent' });

interface Backend {
  name: string;
  redis: boolean;
  open(): Promise<{ database: HeraldDatabase; schema?: TestSchema }>;
}

const backends: Backend[] = [
  {
    name: 'PostgreSQL + Redis',
    redis: true,
    open: async () => {
      const schema = await createTestSchema(inject('databaseUrl'));
      return { database: await createDatabase({ kind: 'postgres', url: schema.url }), schema };
    },
  },
  {
    name: 'embedded PGlite + memory history',
    redis: false,
    open: async () => ({ database: await createDatabase({ kind: 'embedded', dataDir: 'memory://' }) }),
  },
];

describe.each(backends)('direct history appends on $name', (backend) => {
  let database: HeraldDatabase;
  let schema: TestSchema | undefined;
  let db: Kysely<Database>;
  const closing: Array<() => Promise<unknown>> = [];
  const prefix = `herald-test-${randomUUID()}:`;

  beforeAll(async () => {
    ({ database, schema } = await backend.open());
    db = database.db;
    await migrateToLatest(db);
    await upsertUser(db, { id: 'writer', name: 'Writer' });
  });

  afterAll(async () => {
    for (const close of closing.reverse()) await close();
    await database.close();
    await schema?.drop();
  });

  function pod(options: { redisUrl?: string; orphanAfterMs?: number } = {}): PubSubService {
    const service = createPubSubService({
      redisUrl: backend.redis ? (options.redisUrl ?? inject('redisUrl')) : undefined,
      redisPrefix: prefix,
      db,
      orphanAfterMs: options.orphanAfterMs,
      logger,
      metrics: createApiMetrics(),
    });
    closing.push(() => service.close());
    return service;
  }

  /** Commits a publish (post + outbox row) without handing it to any pod: what a publisher that died leaves. */
  async function commitPublish(orgId: string, title: string, historyInProcess = false) {
    const draft = await insertPost(db, { orgId, authorId: 'writer', title, tags: [] });
    const publication = await publishPostWithWebhook(db, draft.id, [orgId], { historyInProcess });
    if (!publication?.eventId) throw new Error('not published');
    return {
      post: publication.post,
      eventId: publication.eventId,
      handedToRelay: publication.handedToRelay,
      fanOutDue: publication.fanOutDue,
      historied: publication.historied,
    };
  }

  async function publish(service: PubSubService, orgId: string, title: string) {
    // As publishPost does: an in-process history's event is marked by the publish statement itself.
    const publication = await commitPublish(orgId, title, service.historyInProcess);
    await service.published(publication);
    return publication;
  }

  async function titlesInHistory(service: PubSubService, orgId: string): Promise<string[]> {
    const { epoch } = await service.history.head(orgId);
    const entries = await service.history.readAfter(orgId, epoch, 0);
    return entries.map((entry) => entry.event.post.title);
  }

  async function outboxRow(eventId: string) {
    const { rows } = await sql<{ historied: boolean; handed: boolean }>`
      select historied_at is not null as historied, history_handed_at is not null as handed
      from webhook_outbox where id = ${eventId}`.execute(db);
    return rows[0];
  }

  it('answers with the event in the history and live without a relay pass, and it is marked historied (with Redis a moment later, in process by the publish itself)', async () => {
    const orgId = `org-${randomUUID()}`;
    const service = pod();
    const live: HistoryEntry[] = [];
    closing.push(await service.history.listen(orgId, (entry) => live.push(entry)).then((stop) => async () => stop()));
    let releaseLock: (() => void) | undefined;
    let lockHeld: Promise<unknown> = Promise.resolve();
    if (backend.redis) {
      await service.ready(5_000);
      // Another session holds the relay lock for the whole publish: no relay pass can run meanwhile.
      const locked = new Promise<void>((resolve) => {
        lockHeld = db.transaction().execute(async (trx) => {
          await sql`select pg_advisory_xact_lock(hashtext(current_schema() || ':herald-subscription-history-relay'))`.execute(
            trx,
          );
          resolve();
          await new Promise<void>((release) => {
            releaseLock = release;
          });
        });
      });
      await locked;
    }
    // PGlite: the relay is never started (no `ready()`), so only the publisher can put the event there.
    const { eventId } = await publish(service, orgId, 'direct');
    expect(await titlesInHistory(service, orgId)).toEqual(['direct']);
    await waitFor('the live entry', () => live.length === 1); // Redis pub/sub reaches listeners a moment later
    expect(live.map((entry) => entry.event.eventId)).toEqual([eventId]);
    releaseLock?.();
    await lockHeld;
    await waitFor('the batched historied_at mark', async () => (await outboxRow(eventId))?.historied === true);
    expect(await outboxRow(eventId)).toEqual({ historied: true, handed: false });
  });

  it('appends the event of a publisher that died between commit and append once its grace has passed, and leaves younger ones to their publishers', async () => {
    const orgId = `org-${randomUUID()}`;
    const service = pod();
    await service.ready(5_000);
    const { eventId } = await commitPublish(orgId, 'orphan');
    const relay = (orphanAfterMs: number) =>
      createHistoryRelay({ db, history: service.history, logger, metrics: createApiMetrics(), orphanAfterMs });
    const patient = relay(60_000);
    patient.start();
    await patient.wake();
    await patient.stop();
    expect(await titlesInHistory(service, orgId)).toEqual([]);
    expect(await outboxRow(eventId)).toEqual({ historied: false, handed: false });

    const prompt = relay(0);
    prompt.start();
    await prompt.wake();
    await prompt.stop();
    expect(await titlesInHistory(service, orgId)).toEqual(['orphan']);
    expect((await outboxRow(eventId))?.historied).toBe(true);
  });

  it('puts an event in the history once when the relay races its direct append, or repeats it after a lost mark', async () => {
    const orgId = `org-${randomUUID()}`;
    const service = pod();
    await service.ready(5_000);
    const live: HistoryEntry[] = [];
    closing.push(await service.history.listen(orgId, (entry) => live.push(entry)).then((stop) => async () => stop()));
    const relay = createHistoryRelay({
      db,
      history: service.history,
      logger,
      metrics: createApiMetrics(),
      orphanAfterMs: 0,
    });
    relay.start();
    // Racing: the relay treats the young event as an orphan while its publisher appends it.
    for (let i = 1; i <= 5; i++) {
      const publication = await commitPublish(orgId, `raced ${i}`);
      await Promise.all([service.published(publication), relay.wake()]);
    }
    await relay.wake();
    await relay.stop();
    expect(await titlesInHistory(service, orgId)).toEqual(['raced 1', 'raced 2', 'raced 3', 'raced 4', 'raced 5']);
    await waitFor('the live entries', () => live.length >= 5);
    await new Promise((resolve) => setTimeout(resolve, 100)); // a repeated entry would arrive meanwhile
    expect(live.map((entry) => entry.event.post.title)).toEqual([
      'raced 1',
      'raced 2',
      'raced 3',
      'raced 4',
      'raced 5',
    ]);
  });

  it.runIf(!backend.redis)(
    'hands an event its statement marked back to the relay, unmarked, when its pod is closing, and the relay appends it',
    async () => {
      const orgId = `org-${randomUUID()}`;
      const shutting = pod();
      await shutting.close();
      const publication = await commitPublish(orgId, 'while closing', shutting.historyInProcess);
      expect(publication.historied).toBe(true);
      expect(await outboxRow(publication.eventId)).toEqual({ historied: true, handed: false });
      await shutting.published(publication);
      expect(await outboxRow(publication.eventId)).toEqual({ historied: false, handed: true });
      // The next process's relay (here: a relay on a fresh history) puts it in the history.
      const next = pod();
      const relay = createHistoryRelay({ db, history: next.history, logger, metrics: createApiMetrics() });
      relay.start();
      await relay.wake();
      await relay.stop();
      expect(await titlesInHistory(next, orgId)).toEqual(['while closing']);
      expect((await outboxRow(publication.eventId))?.historied).toBe(true);
    },
  );

  it.runIf(backend.redis)(
    'hands the event of a pod that cannot reach Redis to the relay, and publishes of its organisation on other pods queue behind it',
    async () => {
      const orgId = `org-${randomUUID()}`;
      const proxy = await startCuttableProxy(new URL(inject('redisUrl')));
      closing.push(() => proxy.close());
      const cutOff = pod({ redisUrl: `redis://127.0.0.1:${proxy.port}` });
      const healthy = pod();
      await Promise.all([cutOff.ready(5_000), healthy.ready(5_000)]);
      const live: HistoryEntry[] = [];
      closing.push(await healthy.history.listen(orgId, (entry) => live.push(entry)).then((stop) => async () => stop()));

      proxy.cut();
      await waitFor('the cut-off pod to notice', () => !cutOff.readiness().ready);
      const first = await publish(cutOff, orgId, 'first, from the cut-off pod');
      expect(await outboxRow(first.eventId)).toEqual({ historied: false, handed: true });
      // Answered; now a later publish on a healthy pod must not overtake it.
      const second = await publish(healthy, orgId, 'second, from a healthy pod');
      expect(await titlesInHistory(healthy, orgId)).toEqual([
        'first, from the cut-off pod',
        'second, from a healthy pod',
      ]);
      await waitFor('the live entries', () => live.length === 2);
      expect(live.map((entry) => entry.event.post.title)).toEqual([
        'first, from the cut-off pod',
        'second, from a healthy pod',
      ]);
      expect(second.handedToRelay).toBe(true);
      await waitFor('the relay to mark both', async () => (await outboxRow(second.eventId))?.historied === true);

      // Once the handed events are in, the organisation's publishes go direct again.
      const third = await publish(healthy, orgId, 'third');
      expect(third.handedToRelay).toBe(false);
      await waitFor('the third live entry', () => live.length === 3);
      expect(live.map((entry) => entry.position)).toEqual([1, 2, 3]);
    },
  );

  it.runIf(backend.redis)(
    'hands over an event whose append hangs (Redis paused), and the late append and the relay put it in the history once',
    async () => {
      const orgId = `org-${randomUUID()}`;
      const redis = await ownRedis(await freePort());
      closing.push(() => redis.cleanup());
      await redis.start();
      const admin = new Redis(redis.url);
      closing.push(() => admin.quit());
      const service = pod({ redisUrl: redis.url });
      await service.ready(5_000);
      const live: HistoryEntry[] = [];
      closing.push(await service.history.listen(orgId, (entry) => live.push(entry)).then((stop) => async () => stop()));

      // Redis answers nobody for 3.5 s: the append is sent but lands only after the pod gave up on it.
      await admin.call('CLIENT', 'PAUSE', '3500', 'ALL');
      const { eventId } = await publish(service, orgId, 'paused');
      expect((await outboxRow(eventId))?.handed).toBe(true);
      await waitFor('the relay to move it', async () => (await outboxRow(eventId))?.historied === true, {
        timeoutMs: 20_000,
      });
      expect(await titlesInHistory(service, orgId)).toEqual(['paused']);
      await waitFor('the live entry', () => live.length >= 1);
      await new Promise((resolve) => setTimeout(resolve, 200)); // a repeated entry would arrive meanwhile
      expect(live.map((entry) => entry.event.eventId)).toEqual([eventId]);
    },
    30_000,
  );
});
