import { createDatabase, type HeraldDatabase, migrateToLatest } from '@herald/db';
import { waitFor } from '@herald/testing/ports';
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHistoryMarks, HISTORY_MARK_BATCH } from './history-marks.js';

// The batched `historied_at` marks of directly appended events (embedded PGlite, a real database):
// every mark is written (more than a batch in several statements), and marks whose statement failed are
// written on a later try.

let database: HeraldDatabase;
const logger = pino({ level: 'silent' });

beforeAll(async () => {
  database = await createDatabase({ kind: 'embedded', dataDir: 'memory://' });
  await migrateToLatest(database.db);
});

afterAll(() => database.close());

async function insertEvents(prefix: string, count: number): Promise<string[]> {
  const ids = Array.from({ length: count }, (_, i) => `evt_${prefix}_${i}`);
  for (const id of ids)
    await sql`insert into webhook_outbox (id, org_id, type, body) values (${id}, 'org-m', 'post.published', '{}')`.execute(
      database.db,
    );
  return ids;
}

async function historied(ids: string[]): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from webhook_outbox where id = any(${ids}::text[]) and historied_at is not null`.execute(
    database.db,
  );
  return rows[0]?.n ?? 0;
}

describe('history marks', () => {
  it('writes every mark on flush, more than a batch too', async () => {
    const ids = await insertEvents('batch', HISTORY_MARK_BATCH + 5);
    const marks = createHistoryMarks({ db: database.db, logger });
    for (const id of ids) marks.add(id);
    await marks.flush();
    expect(await historied(ids)).toBe(ids.length);
    await marks.stop();
  });

  it('keeps marks whose statement failed and writes them on a later try', async () => {
    const ids = await insertEvents('retry', 3);
    // The statement fails while the column it sets is gone (as while the database is unreachable).
    await sql`alter table webhook_outbox rename column historied_at to historied_at_away`.execute(database.db);
    const marks = createHistoryMarks({ db: database.db, logger });
    for (const id of ids) marks.add(id);
    await marks.flush();
    await sql`alter table webhook_outbox rename column historied_at_away to historied_at`.execute(database.db);
    expect(await historied(ids)).toBe(0);
    await waitFor('the retry', async () => (await historied(ids)) === ids.length, { timeoutMs: 10_000 });
    await marks.stop();
  });
});
