/**
 * What numbering events in commit order costs an organisation with an ordered (FIFO) webhook endpoint:
 * publishPost's statement (apps/api's `publishPostWithWebhook`, the real one) for `posts` drafts of one
 * organisation, `concurrency` in flight on a pool of as many connections, for an organisation with a
 * FIFO endpoint (each publish takes the organisation's ordering lock and holds it to its commit) and
 * for one with an unordered endpoint (no lock), in alternating rounds. Prints publishes/s and the
 * PostgreSQL backends' CPU per publish for each round.
 *
 * Real PostgreSQL (DATABASE_URL, the local server by default), a throw-away schema; commits are
 * synchronous, as the API's are.
 *
 *   node --import tsx bench/micro/publish-order-micro.ts [posts=4000] [concurrency=16] [rounds=3]
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { createDatabase, insertPost, insertWebhookEndpoint, migrateToLatest, upsertUser } from '@herald/db';
import { TEST_KEYRING } from '@herald/testing';
import { sql } from 'kysely';
import { publishPostWithWebhook } from '../../apps/api/src/post-published-webhook.js';
import { createBenchSchema } from '../src/schema.js';

const POSTS = Number(process.argv[2] ?? 4_000);
const CONCURRENCY = Number(process.argv[3] ?? 16);
const ROUNDS = Number(process.argv[4] ?? 3);
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const schema = await createBenchSchema(DATABASE_URL);
const database = await createDatabase({ kind: 'postgres', url: schema.url, poolMax: CONCURRENCY });
const { db } = database;
try {
  await migrateToLatest(db);
  await upsertUser(db, { id: 'bench-author', name: 'Bench' });
  for (const ordering of ['FIFO', 'UNORDERED'] as const) {
    await insertWebhookEndpoint(db, {
      orgId: `org-${ordering.toLowerCase()}`,
      url: 'https://receiver.example/hook',
      eventTypes: ['post.published'],
      secret: 'whsec_bench',
      keyring: TEST_KEYRING,
      ordering,
    });
  }
  /** CPU µs of the backends of this schema's pool (by search_path in their startup options: all of ours). */
  const backendsCpu = async (): Promise<number> => {
    const { rows } = await sql<{ pid: number }>`select pid from pg_stat_activity
      where datname = current_database() and backend_type = 'client backend'`.execute(db);
    let us = 0;
    for (const { pid } of rows) {
      try {
        const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
        us += (Number(fields[11]) + Number(fields[12])) * 10_000;
      } catch {}
    }
    return us;
  };
  for (let round = 1; round <= ROUNDS; round++) {
    for (const ordering of ['UNORDERED', 'FIFO'] as const) {
      const orgId = `org-${ordering.toLowerCase()}`;
      const drafts: string[] = [];
      for (let i = 0; i < POSTS; i++) {
        drafts.push((await insertPost(db, { orgId, authorId: 'bench-author', title: `p${i}`, tags: [] })).id);
      }
      let next = 0;
      const cpu0 = await backendsCpu();
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next < drafts.length) {
            const publication = await publishPostWithWebhook(db, drafts[next++]!, [orgId]);
            if (!publication?.published) throw new Error('a draft was not published');
          }
        }),
      );
      const seconds = (performance.now() - t0) / 1_000;
      const pgUs = (await backendsCpu()) - cpu0;
      console.log(
        JSON.stringify({
          round,
          endpoint: ordering,
          posts: POSTS,
          concurrency: CONCURRENCY,
          publishesPerSec: Math.round(POSTS / seconds),
          pgCpuUsPerPublish: Math.round(pgUs / POSTS),
        }),
      );
    }
  }
} finally {
  await database.close();
  await schema.drop();
}
