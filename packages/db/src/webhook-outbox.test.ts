import { newEventId, WEBHOOK_TEST_EVENT } from '@herald/contracts';
import { TEST_KEYRING, type TestSchema } from '@herald/testing';
import { type Kysely, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { HeraldDatabase } from './create-database.js';
import type { Database } from './database.js';
import { orgOrderLockWaiters, testBackends, untilOrgOrderLockWaiter } from './testing.js';
import { insertWebhookEndpoint } from './webhook-endpoints.js';
import { insertOutboxEvent, orgOrderLockKey } from './webhook-outbox.js';

// The organisation's ordering lock: taken by whatever records an event of an organisation with an
// ordered (FIFO) endpoint, held to the commit, so its events are numbered in the order they commit.
// PostgreSQL only: waiting takes two connections.

const postgres = testBackends(() => inject('databaseUrl')).find((backend) => backend.name === 'PostgreSQL')!;

describe('the organisation ordering lock', () => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;
  let schema: TestSchema | undefined;

  beforeAll(async () => {
    ({ database, db, schema } = await postgres.openMigrated());
    for (const [orgId, ordering] of [
      ['org-ordered', 'FIFO'],
      ['org-ordered-too', 'FIFO'],
      ['org-free', 'UNORDERED'],
    ] as const) {
      await insertWebhookEndpoint(db, {
        orgId,
        url: 'https://example.com/hook',
        eventTypes: ['post.published'],
        secret: 'whsec_order',
        keyring: TEST_KEYRING,
        ordering,
      });
    }
  });

  afterAll(async () => {
    await database.close();
    await schema?.drop();
  });

  const testEvent = (orgId: string) => {
    const id = newEventId();
    return {
      id,
      orgId,
      type: WEBHOOK_TEST_EVENT,
      body: JSON.stringify({
        id,
        type: WEBHOOK_TEST_EVENT,
        created: new Date().toISOString(),
        data: { endpointId: 'we_order', message: 'order' },
      }),
    };
  };

  /** `record` in a transaction of its own, started while another transaction has recorded an event of `orgId` and is still open. */
  async function whileHeld(orgId: string, record: (trx: Kysely<Database>) => Promise<void>) {
    const order: string[] = [];
    let recording: Promise<void> | undefined;
    let waited = 0;
    await db.transaction().execute(async (holder) => {
      // The holder records an event of the organisation, as a publish would, and stays open.
      await insertOutboxEvent(holder, testEvent(orgId));
      recording = db
        .transaction()
        .execute(record)
        .then(() => {
          order.push('recorded');
        });
      const deadline = Date.now() + 10_000;
      for (;;) {
        waited = await orgOrderLockWaiters(db, orgId);
        if (waited > 0 || order.length > 0 || Date.now() > deadline) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    });
    order.push('holder committed');
    await recording;
    return { order, waited };
  }

  it('makes insertOutboxEvent wait for the holder when the organisation has a FIFO endpoint', async () => {
    const event = testEvent('org-ordered');
    expect(await whileHeld('org-ordered', (trx) => insertOutboxEvent(trx, event))).toEqual({
      order: ['holder committed', 'recorded'],
      waited: 1,
    });
    expect(await db.selectFrom('webhook_outbox').select('id').where('id', '=', event.id).execute()).toHaveLength(1);
  });

  it('takes nothing for an organisation without one: its writers never wait for each other', async () => {
    expect(await whileHeld('org-free', (trx) => insertOutboxEvent(trx, testEvent('org-free')))).toEqual({
      order: ['recorded', 'holder committed'],
      waited: 0,
    });
  });

  it("never holds another organisation's writes, even one with a FIFO endpoint of its own", async () => {
    await db.transaction().execute(async (holder) => {
      await insertOutboxEvent(holder, testEvent('org-ordered'));
      const other = testEvent('org-ordered-too');
      // Were it to wait for the holder, it would wait for this transaction: the race ends it after 10 s.
      const recorded = await Promise.race([
        db
          .transaction()
          .execute((trx) => insertOutboxEvent(trx, other))
          .then(() => 'recorded'),
        new Promise<'waited'>((resolve) => setTimeout(() => resolve('waited'), 10_000)),
      ]);
      expect(recorded).toBe('recorded');
    });
  });

  it('is let go when its holder dies: pg_terminate_backend of the holder, and the waiting write is recorded', async () => {
    const holder = new pg.Client({ connectionString: schema!.url });
    holder.on('error', () => {}); // terminated below, on purpose
    await holder.connect();
    try {
      const pid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      await holder.query('begin');
      await holder.query(`select pg_advisory_xact_lock(${orgOrderLockKey("'org-ordered'")})`);
      const event = testEvent('org-ordered');
      const recording = db.transaction().execute((trx) => insertOutboxEvent(trx, event));
      expect(await untilOrgOrderLockWaiter(db, 'org-ordered')).toBe(1);
      await sql`select pg_terminate_backend(${pid})`.execute(db);
      await recording;
      expect(await db.selectFrom('webhook_outbox').select('id').where('id', '=', event.id).execute()).toHaveLength(1);
    } finally {
      await holder.end().catch(() => {});
    }
  });
});
