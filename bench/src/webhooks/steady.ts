/**
 * The steady-rate trial's parts: publishing at a fixed rate through publishPost, and each delivery's
 * stages read back from the database.
 */
import type { HeraldDatabase } from '@herald/db';
import pg from 'pg';
import { publishPostWithWebhook } from '../../../apps/api/src/post-published-webhook.js';
import { round, sleep, wallNow } from '../common.js';
import type { Percentiles, SteadyStages } from './results.js';

export interface SteadyPublish {
  durationMs: number;
  /** publishPost calls that failed (e.g. no pooled connection in time): not counted anywhere else. */
  failed: number;
  /** `dueAt`: when the open loop meant to send it; `sentAt`: when the call started (it then waits for a pooled connection). */
  times: Array<{ postId: string; dueAt: number; sentAt: number; committedAt: number }>;
}

/**
 * Publishes the drafts at a steady rate (open loop: each at its scheduled time, whatever the previous
 * ones are doing) through the API's own one-statement publishPost (`publishPostWithWebhook`: the post
 * and its outbox row commit together), called directly so the API's HTTP and GraphQL layers (priced
 * elsewhere) do not limit the rate. As in the API's cluster mode, the statement sends no NOTIFY and the
 * dispatchers are woken through Redis after the commit. `committedAt` is when the statement answered.
 */
export async function publishSteadily(
  database: HeraldDatabase,
  orgId: string,
  events: readonly { postId: string }[],
  perSec: number,
  /** Cluster mode's Redis wake-up; without it, the statement sends the NOTIFY (single mode). */
  wake: { wake(): void } | undefined,
): Promise<SteadyPublish> {
  const times: SteadyPublish['times'] = [];
  let failed = 0;
  const start = wallNow();
  const inFlight = new Set<Promise<void>>();
  for (let i = 0; i < events.length; i++) {
    const due = start + (i * 1000) / perSec;
    const wait = due - wallNow();
    if (wait > 1) await sleep(wait);
    const postId = events[i]!.postId;
    const one = (async () => {
      const sentAt = wallNow();
      try {
        const published = await publishPostWithWebhook(database.db, postId, [orgId], { notify: !wake });
        if (published) {
          times.push({ postId, dueAt: due, sentAt, committedAt: wallNow() });
          wake?.wake();
        } else failed++;
      } catch {
        failed++;
      }
    })();
    inFlight.add(one);
    void one.finally(() => inFlight.delete(one));
  }
  await Promise.all([...inFlight]);
  return { durationMs: wallNow() - start, times, failed };
}

/** {@link SteadyStages} of a steady trial, from its database (one endpoint). */
export async function steadyStages(
  databaseUrl: string,
  times: SteadyPublish['times'],
  arrived: ReadonlyMap<string, number>,
  endpointCap: number,
): Promise<SteadyStages> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{
      post_id: string;
      fanned_out: number;
      post_at: number;
      post_ms: number;
      recorded: number;
    }>(`
      select event.body::json->'data'->>'id' as post_id,
        extract(epoch from delivery.created_at) * 1000 as fanned_out,
        extract(epoch from attempt.at) * 1000 as post_at, attempt.duration_ms as post_ms,
        extract(epoch from delivery.updated_at) * 1000 as recorded
      from webhook_outbox event
      join webhook_deliveries delivery on delivery.event_id = event.id
      cross join lateral (
        select at, duration_ms from webhook_attempt_log where delivery_id = delivery.id order by at limit 1
      ) attempt
      where event.type = 'post.published'
    `);
    const committed = new Map(times.map((one) => [one.postId, one.committedAt]));
    const stage = {
      commitToFanOut: [] as number[],
      fanOutToPost: [] as number[],
      postToReceiver: [] as number[],
      post: [] as number[],
      answerToRecord: [] as number[],
    };
    let firstPost = Number.POSITIVE_INFINITY;
    let lastAnswer = 0;
    let busy = 0;
    for (const row of rows) {
      const commit = committed.get(row.post_id);
      const arrival = arrived.get(row.post_id);
      const [fannedOut, postAt, postMs, recorded] = [row.fanned_out, row.post_at, row.post_ms, row.recorded].map(
        Number,
      );
      if (commit === undefined || arrival === undefined) continue;
      stage.commitToFanOut.push(fannedOut! - commit);
      stage.fanOutToPost.push(postAt! - fannedOut!);
      stage.postToReceiver.push(arrival - postAt!);
      stage.post.push(postMs!);
      stage.answerToRecord.push(recorded! - (postAt! + postMs!));
      firstPost = Math.min(firstPost, postAt!);
      lastAnswer = Math.max(lastAnswer, postAt! + postMs!);
      busy += postMs!;
    }
    return {
      commitToFanOut: percentiles(stage.commitToFanOut),
      fanOutToPost: percentiles(stage.fanOutToPost),
      postToReceiver: percentiles(stage.postToReceiver),
      post: percentiles(stage.post),
      answerToRecord: percentiles(stage.answerToRecord),
      slotBusyShare: round(busy / Math.max(1, endpointCap * (lastAnswer - firstPost)), 3),
    };
  } finally {
    await client.end().catch(() => {});
  }
}

export function percentiles(values: number[]): Percentiles {
  if (values.length === 0) return { p50Ms: Number.NaN, p99Ms: Number.NaN, maxMs: Number.NaN };
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!, 1);
  return { p50Ms: at(0.5), p99Ms: at(0.99), maxMs: round(sorted.at(-1)!, 1) };
}
