import { createTestSchema, type TestSchema } from '@herald/testing';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createPostgresEventStore, type PostgresEventStore } from './postgres-event-store.js';
import type { WebhookEvent } from './webhook-event.js';

function makeEvent(id: string): WebhookEvent<{ n: number }> {
  return { id, type: 'post.published', created: '2026-05-28T20:26:40.000Z', data: { n: 1 } };
}

describe('PostgreSQL event store', () => {
  let schema: TestSchema;
  let pool: pg.Pool;
  let store: PostgresEventStore;

  beforeAll(async () => {
    schema = await createTestSchema(inject('databaseUrl'));
    pool = new pg.Pool({ connectionString: schema.url, max: 10 });
    store = createPostgresEventStore({ pool });
    await store.createTable();
  });

  afterAll(async () => {
    await pool.end();
    await schema.drop();
  });

  it('creating the table again changes nothing', async () => {
    await store.recordIfNew(makeEvent('evt_kept'));
    await store.createTable();
    expect((await store.find('evt_kept'))?.event.id).toBe('evt_kept');
  });

  it('stores a new event once and tells a duplicate apart', async () => {
    const event = makeEvent('evt_once');
    expect(await store.recordIfNew(event)).toBe(true);
    expect(await store.recordIfNew(event)).toBe(false);
    expect(await store.recordIfNew({ ...event, data: { n: 2 } })).toBe(false);
    const stored = await store.find('evt_once');
    expect(stored).toMatchObject({ event, processedAt: null });
    expect(stored?.receivedAt).toBeInstanceOf(Date);
    const { rows } = await pool.query('select count(*)::int as n from webhook_events where id = $1', ['evt_once']);
    expect(rows[0].n).toBe(1);
  });

  it('tells exactly one of many concurrent deliveries of one event that it is new', async () => {
    const event = makeEvent('evt_race');
    const results = await Promise.all(Array.from({ length: 20 }, () => store.recordIfNew(event)));
    expect(results.filter(Boolean)).toHaveLength(1);
  });

  it('lists unprocessed events oldest first until they are marked processed', async () => {
    const local = createPostgresEventStore({ pool, table: 'work_events' });
    await local.createTable();
    for (const id of ['evt_w1', 'evt_w2', 'evt_w3']) await local.recordIfNew(makeEvent(id));
    expect((await local.listUnprocessed()).map((event) => event.id)).toEqual(['evt_w1', 'evt_w2', 'evt_w3']);
    expect((await local.listUnprocessed(2)).map((event) => event.id)).toEqual(['evt_w1', 'evt_w2']);

    await local.markProcessed('evt_w1');
    await local.markProcessed('evt_unknown');
    expect((await local.listUnprocessed()).map((event) => event.id)).toEqual(['evt_w2', 'evt_w3']);
    expect((await local.find('evt_w1'))?.processedAt).toBeInstanceOf(Date);
    expect(await local.find('evt_unknown')).toBeUndefined();
  });

  it('accepts a schema-qualified table and refuses a name that is not a plain identifier', async () => {
    expect(() => createPostgresEventStore({ pool, table: `${schema.schema}.qualified_events` })).not.toThrow();
    for (const table of ['events; drop table users', 'Events', '"quoted"', 'a.b.c', '']) {
      expect(() => createPostgresEventStore({ pool, table })).toThrow(TypeError);
    }
  });
});
