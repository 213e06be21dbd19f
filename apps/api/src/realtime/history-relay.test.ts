import type { HistoryEntry } from '@herald/contracts';
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createApiMetrics } from '../metrics.js';
import { startTestApi, type TestApi } from '../testing/test-api.js';
import { createHistoryRelay } from './history-relay.js';
import { createMemoryHistory } from './memory-history.js';

// The outbox → history relay on real PostgreSQL: committed post.published events enter the history
// once each, in outbox order, with one relay at a time even when several pods' relays run together.

let api: TestApi;
let token: string;

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl') });
  token = await api.token({ sub: 'writer', name: 'Writer', orgs: ['org-r'] });
  // The API's own relay stops, so the events below stay pending for the relays under test.
  await api.app.pubsub.close();
});

afterAll(() => api.close());

describe('history relay', () => {
  it('moves each pending event once, in outbox order, with three relays woken together', async () => {
    for (let i = 1; i <= 12; i++) await api.createAndPublish(token, 'org-r', `post ${i}`);
    const history = createMemoryHistory({ size: 100, ttlMs: 60_000 });
    const seen: HistoryEntry[] = [];
    await history.listen('org-r', (entry) => seen.push(entry));
    const relays = [1, 2, 3].map(() =>
      createHistoryRelay({
        db: api.app.database.db,
        history,
        logger: pino({ level: 'silent' }),
        metrics: createApiMetrics(),
      }),
    );
    for (const relay of relays) relay.start();
    await Promise.all(relays.map((relay) => relay.wake()));
    await Promise.all(relays.map((relay) => relay.wake()));
    await Promise.all(relays.map((relay) => relay.stop()));

    expect(seen.map((entry) => entry.event.post.title)).toEqual(Array.from({ length: 12 }, (_, i) => `post ${i + 1}`));
    expect(seen.map((entry) => entry.position)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    const { rows } = await sql<{ pending: string }>`
      select count(*) as pending from webhook_outbox where historied_at is null and type = 'post.published'
    `.execute(api.app.database.db);
    expect(Number(rows[0]?.pending)).toBe(0);
  });

  it('leaves events pending while the history refuses them, and moves them once it accepts again', async () => {
    await api.createAndPublish(token, 'org-r', 'while refused');
    const memory = createMemoryHistory({ size: 100, ttlMs: 60_000 });
    let refusing = true;
    const history = {
      ...memory,
      append: (events: Parameters<typeof memory.append>[0]) =>
        refusing
          ? Promise.resolve(events.map(() => ({ ok: false as const, error: new Error('redis down') })))
          : memory.append(events),
    };
    const seen: string[] = [];
    await memory.listen('org-r', (entry) => seen.push(entry.event.post.title));
    const relay = createHistoryRelay({
      db: api.app.database.db,
      history,
      logger: pino({ level: 'silent' }),
      metrics: createApiMetrics(),
    });
    relay.start();
    await relay.wake();
    expect(relay.readiness()).toEqual({ ready: false, reason: 'history relay failing' });
    expect(seen).toEqual([]);
    refusing = false;
    await relay.wake();
    await relay.stop();
    expect(seen).toEqual(['while refused']);
    expect(relay.readiness()).toEqual({ ready: true });
  });
});
