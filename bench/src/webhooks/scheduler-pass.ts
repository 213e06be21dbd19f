/**
 * The due scan's cost with a large retry backlog.
 */
import { randomBytes } from 'node:crypto';
import { createDatabase, migrateToLatest } from '@herald/db';
import { queueDueDeliveries } from '@herald/webhook-engine';
import { sql } from 'kysely';
import { round, type Spread, spread, wallNow } from '../common.js';

/**
 * The due scan's cost with a large retry backlog: 100,000 PENDING deliveries waiting for a retry (none
 * due), then `queueDueDeliveries` timed a few times. It walks the index on `next_attempt_at` with a
 * LIMIT, so it should cost about the same as with an empty table.
 */
export async function measureSchedulerPass(
  databaseUrl: string,
  pendingRetries: number,
): Promise<{ pendingRetries: number; passMs: Spread }> {
  const schema = `bench_sched_${randomBytes(4).toString('hex')}`;
  const url = new URL(databaseUrl);
  url.searchParams.set('options', `-c search_path=${schema}`);
  const admin = await createDatabase({ kind: 'postgres', url: databaseUrl, poolMax: 1 });
  await sql`create schema ${sql.id(schema)}`.execute(admin.db);
  const database = await createDatabase({ kind: 'postgres', url: url.toString(), poolMax: 2 });
  try {
    await migrateToLatest(database.db);
    await sql`insert into webhook_endpoints (id, org_id, url, event_types) values ('we_bench', 'bench', 'http://127.0.0.1:9/', '{post.published}')`.execute(
      database.db,
    );
    await sql`insert into webhook_outbox (id, org_id, type, body, dispatched_at) values ('evt_bench', 'bench', 'post.published', '{}', now())`.execute(
      database.db,
    );
    await sql`
      insert into webhook_outbox (id, org_id, type, body, dispatched_at)
      select 'evt_bench' || n, 'bench', 'post.published', '{}', now() from generate_series(1, ${pendingRetries}) n
    `.execute(database.db);
    await sql`
      insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, attempt_count, next_attempt_at)
      select 'del_bench' || n, 'evt_bench' || n, 'we_bench', 'bench', 'post.published', 1,
        now() + interval '1 hour' + n * interval '1 millisecond'
      from generate_series(1, ${pendingRetries}) n
    `.execute(database.db);
    await sql`analyze webhook_deliveries`.execute(database.db);
    const passes: number[] = [];
    for (let i = 0; i < 7; i++) {
      const t0 = wallNow();
      const due = await queueDueDeliveries(database.db, { limit: 200, queueLeaseMs: 15_000 });
      passes.push(round(wallNow() - t0, 2));
      if (due.length > 0) throw new Error(`expected no due delivery, got ${due.length}`);
    }
    return { pendingRetries, passMs: spread(passes.slice(2)) };
  } finally {
    await database.close();
    await sql`drop schema ${sql.id(schema)} cascade`.execute(admin.db).catch(() => {});
    await admin.close();
  }
}
