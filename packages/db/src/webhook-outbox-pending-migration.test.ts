import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { HeraldDatabase } from './create-database.js';
import type { Database } from './database.js';
import { migrateTestDatabaseTo, testBackends } from './testing.js';

// The pending-fan-out migration: events still to fan out move from "`dispatched_at` is null" to a row in
// `webhook_outbox_pending`, which a trigger fills as events are recorded and the fan-out empties. An
// upgrade must queue exactly the events the old version had not fanned out (none lost, none sent twice),
// and a rollback must give every event fanned out since its mark back, so the old fan-out does not send
// it again.

const BEFORE = '2026-12-01T12-00_webhook-claim-functions';
const MIGRATION = '2026-12-02T08-00_webhook-outbox-pending';

const backends = testBackends(() => inject('databaseUrl'));

describe.each(backends)('the pending-fan-out migration on $name', ({ openMigrated }) => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;

  beforeAll(async () => {
    ({ database, db } = await openMigrated(BEFORE));
    await sql`insert into webhook_endpoints (id, org_id, url, event_types)
      values ('we_pending', 'org-pending', 'https://example.com/hook', '{post.published}')`.execute(db);
    // One event the old fan-out already handled, one it had not reached yet.
    await sql`insert into webhook_outbox (id, org_id, type, body, dispatched_at)
      values ('evt_old_done', 'org-pending', 'post.published', '{}', now())`.execute(db);
    await sql`insert into webhook_outbox (id, org_id, type, body)
      values ('evt_old_waiting', 'org-pending', 'post.published', '{}')`.execute(db);
  });

  afterAll(() => database.close());

  /** The events waiting in the queue, by id. */
  const waiting = async () =>
    (
      await sql<{ id: string }>`select event.id from webhook_outbox_pending pending
        join webhook_outbox event on event.seq = pending.seq order by event.seq`.execute(db)
    ).rows.map((row) => row.id);

  /** The fan-out function's events and deliveries for one batch. */
  const fanOut = async () => {
    const { rows } = await sql<{ events: number | null; id: string | null }>`
      select events, id from herald_webhook_fan_out(100, 'q:test', 60000, 'whd_')`.execute(db);
    return { events: rows.find((row) => row.events !== null)?.events, deliveries: rows.filter((row) => row.id) };
  };

  it('queues the events the old fan-out had not reached, and the trigger queues new ones unless recorded dispatched', async () => {
    await migrateTestDatabaseTo(db, MIGRATION);
    expect(await waiting()).toEqual(['evt_old_waiting']);
    await sql`insert into webhook_outbox (id, org_id, type, body) values
      ('evt_new_a', 'org-pending', 'post.published', '{}'), ('evt_new_b', 'org-pending', 'post.published', '{}')`.execute(
      db,
    );
    await sql`insert into webhook_outbox (id, org_id, type, body, dispatched_at)
      values ('evt_new_nothing', 'org-pending', 'post.published', '{}', now())`.execute(db);
    expect(await waiting()).toEqual(['evt_old_waiting', 'evt_new_a', 'evt_new_b']);
  });

  it('fans out from the queue, oldest first, leaving the outbox rows as they were', async () => {
    const { events, deliveries } = await fanOut();
    expect(events).toBe(3);
    expect(deliveries).toHaveLength(3);
    expect(await waiting()).toEqual([]);
    const { rows } = await sql<{ id: string }>`
      select event_id as id from webhook_deliveries order by event_id`.execute(db);
    expect(rows.map((row) => row.id)).toEqual(['evt_new_a', 'evt_new_b', 'evt_old_waiting']);
    expect((await fanOut()).events).toBe(0);
  });

  it('marks every event fanned out since as dispatched on the way down, and leaves one still waiting due', async () => {
    await sql`insert into webhook_outbox (id, org_id, type, body)
      values ('evt_still_waiting', 'org-pending', 'post.published', '{}')`.execute(db);
    await migrateTestDatabaseTo(db, BEFORE);
    const { rows } = await sql<{ id: string; dispatched: boolean }>`
      select id, dispatched_at is not null as dispatched from webhook_outbox order by seq`.execute(db);
    expect(rows).toEqual([
      { id: 'evt_old_done', dispatched: true },
      { id: 'evt_old_waiting', dispatched: true },
      { id: 'evt_new_a', dispatched: true },
      { id: 'evt_new_b', dispatched: true },
      { id: 'evt_new_nothing', dispatched: true },
      { id: 'evt_still_waiting', dispatched: false },
    ]);
    // The old fan-out takes only the event still waiting.
    const { events } = await fanOut();
    expect(events).toBe(1);

    // And up again, nothing is queued twice.
    await migrateTestDatabaseTo(db, MIGRATION);
    expect(await waiting()).toEqual([]);
  });
});
