/**
 * Reading a run's database after a dispatcher run: waiting for the engine to go idle, counting attempts
 * by error, and the deliveries and attempts behind duplicated events.
 */
import pg from 'pg';
import { sleep, wallNow } from '../common.js';
import type { DuplicateSample } from '../webhook-receiver.js';
import type { DispatcherRun, DuplicateEvidence } from './results.js';

/** Waits until no delivery is PENDING and no lane holds a slot (the engine has recorded everything). */
export async function waitForIdleEngine(databaseUrl: string, deadline: number): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    for (;;) {
      const { rows } = await client.query<{ busy: boolean }>(
        `select exists (select 1 from webhook_deliveries where status = 'PENDING')
            or exists (select 1 from webhook_endpoint_slots where slots > 0 and leased_until > now()) as busy`,
      );
      if (!rows[0]?.busy) return;
      if (wallNow() > deadline) throw new Error('the warm-up left deliveries pending or slots held');
      await sleep(50);
    }
  } finally {
    await client.end().catch(() => {});
  }
}

/** Every attempt the run's database recorded, and the failed ones counted by error. */
export async function countAttempts(databaseUrl: string): Promise<NonNullable<DispatcherRun['attempts']>> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ error: string | null; n: number }>(
      'select error, count(1)::int as n from webhook_attempt_log group by error',
    );
    const failed: Record<string, number> = {};
    for (const row of rows) if (row.error !== null) failed[row.error] = row.n;
    return { total: rows.reduce((sum, row) => sum + row.n, 0), failed };
  } finally {
    await client.end().catch(() => {});
  }
}

/** The database's view of duplicated events: their deliveries and every attempt recorded. */
export async function explainDuplicates(
  databaseUrl: string,
  samples: readonly DuplicateSample[],
): Promise<DuplicateEvidence[]> {
  if (samples.length === 0) return [];
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const eventIds = samples.map((sample) => sample.key.split(' ').pop() ?? sample.key);
    const { rows } = await client.query<{
      event_id: string;
      id: string;
      endpoint_id: string;
      status: string;
      attempt_count: number;
      attempts: DuplicateEvidence['deliveries'][number]['attempts'] | null;
    }>(
      `select d.event_id, d.id, d.endpoint_id, d.status, d.attempt_count,
         (select json_agg(json_build_object('at', a.at, 'statusCode', a.status_code, 'durationMs', a.duration_ms,
            'error', a.error) order by a.at) from webhook_attempt_log a where a.delivery_id = d.id) as attempts
       from webhook_deliveries d where d.event_id = any($1::text[]) order by d.event_id, d.id`,
      [eventIds],
    );
    return samples.map((sample, index) => ({
      ...sample,
      deliveries: rows
        .filter((row) => row.event_id === eventIds[index])
        .map((row) => ({
          id: row.id,
          endpointId: row.endpoint_id,
          status: row.status,
          attemptCount: row.attempt_count,
          attempts: row.attempts ?? [],
        })),
    }));
  } finally {
    await client.end().catch(() => {});
  }
}

/** The posts of the run's `post.published` events in the outbox's `seq` order: a FIFO endpoint's order. */
export async function outboxPostOrder(databaseUrl: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ post_id: string }>(
      `select body::json -> 'data' ->> 'id' as post_id from webhook_outbox
       where type = 'post.published' order by seq`,
    );
    return rows.map((row) => row.post_id);
  } finally {
    await client.end().catch(() => {});
  }
}
