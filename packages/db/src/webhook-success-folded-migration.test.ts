import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { HeraldDatabase } from './create-database.js';
import type { Database } from './database.js';
import { migrateTestDatabaseTo, testBackends } from './testing.js';

// The folded-success migration keeps a delivery's success on its row and lists it with the failed attempts
// through the view `webhook_attempt_log`. Its `down` must give the kept successes back to
// `webhook_attempts` before it drops the columns: a rollback loses no attempt, and migrating up again
// lists each attempt once.

const BEFORE = '2026-11-28T17-40_webhook-throttles';
const MIGRATION = '2026-11-30T15-00_webhook-success-folded';

const backends = testBackends(() => inject('databaseUrl'));

describe.each(backends)('the folded-success migration on $name', ({ openMigrated }) => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;

  beforeAll(async () => {
    ({ database, db } = await openMigrated(MIGRATION));
    await sql`insert into webhook_endpoints (id, org_id, url, event_types)
      values ('we_fold', 'org-fold', 'https://example.com/hook', '{post.published}')`.execute(db);
    await sql`insert into webhook_outbox (id, org_id, type, body)
      values ('evt_fold', 'org-fold', 'post.published', '{}')`.execute(db);
    // A delivery that failed once, then succeeded: the failure is an attempt row, the success on the delivery.
    await sql`insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, status, attempt_count,
        succeeded_at, success_status_code, success_duration_ms, success_response_body)
      values ('whd_fold', 'evt_fold', 'we_fold', 'org-fold', 'post.published', 'SUCCEEDED', 2,
        '2026-11-30T12:00:05Z', 204, 7, 'ok')`.execute(db);
    await sql`insert into webhook_attempts (delivery_id, at, status_code, duration_ms, error, response_body)
      values ('whd_fold', '2026-11-30T12:00:00Z', 503, 12, 'HTTP_503', 'busy')`.execute(db);
  });

  afterAll(() => database.close());

  /** The delivery's attempts as a reader sees them: through the view while it exists, else the table. */
  const attempts = async (from: 'webhook_attempt_log' | 'webhook_attempts') =>
    (
      await sql<{
        at: Date;
        status_code: number | null;
        duration_ms: number;
        error: string | null;
        response_body: string | null;
      }>`
        select at, status_code, duration_ms, error, response_body from ${sql.table(from)}
        where delivery_id = 'whd_fold' order by at`.execute(db)
    ).rows.map((row) => ({ ...row, at: new Date(row.at).toISOString() }));

  const BOTH = [
    { at: '2026-11-30T12:00:00.000Z', status_code: 503, duration_ms: 12, error: 'HTTP_503', response_body: 'busy' },
    { at: '2026-11-30T12:00:05.000Z', status_code: 204, duration_ms: 7, error: null, response_body: 'ok' },
  ];

  it('lists the failed attempt and the kept success through the view', async () => {
    expect(await attempts('webhook_attempt_log')).toEqual(BOTH);
    expect(await attempts('webhook_attempts')).toHaveLength(1);
  });

  it('moves the kept success back into webhook_attempts on the way down, and lists each attempt once up again', async () => {
    await migrateTestDatabaseTo(db, BEFORE);
    expect(await attempts('webhook_attempts')).toEqual(BOTH);
    const { rows: columns } = await sql<{ name: string }>`
      select column_name as name from information_schema.columns
      where table_schema = current_schema() and table_name = 'webhook_deliveries' and column_name like 'succe%'`.execute(
      db,
    );
    expect(columns).toEqual([]);

    await migrateTestDatabaseTo(db, MIGRATION);
    expect(await attempts('webhook_attempt_log')).toEqual(BOTH);
  });
});
