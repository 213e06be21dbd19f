/**
 * Micro-benchmark of the posts page's database read alone (no HTTP, no GraphQL): `listPostsByOrg` through
 * Herald's database layer (Kysely, query deadline, prepared statements, as the API configures it) against
 * the raw bench loop's statement on a plain `pg.Pool` (bench/src/http-sql.ts `selectPostsPage`), with
 * `concurrency` callers in flight as at 64 keep-alive connections. Rounds alternate (raw, Herald, raw, …)
 * and each prints this process's CPU µs per page, so the two are compared within one run:
 *   node --import tsx bench/micro/posts-page-micro.ts [pages=20000] [rounds=3] [concurrency=64] [columns=page|all]
 * With `ONLY=herald` only Herald's rounds run (for `node --cpu-prof`).
 */
import { createDatabase, listPostsByOrg, migrateToLatest } from '@herald/db';
import { sql } from 'kysely';
import pg from 'pg';

const pages = Number(process.argv[2] ?? 20_000);
const rounds = Number(process.argv[3] ?? 3);
const concurrency = Number(process.argv[4] ?? 64);
const columns = (process.argv[5] ?? 'page') as 'page' | 'all';
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `posts_micro_${process.pid}`;
const admin = await createDatabase({ kind: 'postgres', url: base, poolMax: 1 });
await sql`create schema ${sql.id(schema)}`.execute(admin.db);
const url = new URL(base);
url.searchParams.set('options', `-c search_path=${schema}`);
const herald = await createDatabase({ kind: 'postgres', url: url.toString(), poolMax: 10, preparedStatements: true });
const raw = new pg.Pool({ connectionString: url.toString(), max: 10 });

async function run(page: () => Promise<unknown[]>): Promise<number> {
  let left = pages;
  const before = process.cpuUsage();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left-- > 0) {
        const rows = await page();
        if (rows.length !== 11) throw new Error(`expected 11 rows, got ${rows.length}`);
      }
    }),
  );
  const used = process.cpuUsage(before);
  return (used.user + used.system) / pages;
}

try {
  await migrateToLatest(herald.db);
  await sql`insert into users (id, name) values ('author-1', 'Ada'), ('author-2', 'Grace')`.execute(herald.db);
  await sql`insert into posts (id, org_id, author_id, title, tags)
    select 'post-' || n, 'org-micro', 'author-' || (1 + n % 2), 'Post number ' || n, array['news', 'tag' || (n % 5)]
    from generate_series(1, 100) n`.execute(herald.db);
  const heraldPage = () => listPostsByOrg(herald.db, { orgId: 'org-micro', limit: 11, columns });
  const rawPage = async () =>
    (
      await raw.query({
        name: 'bench_posts_page',
        text: 'select p.id, p.title, p.tags, u.name from posts p join users u on u.id = p.author_id where p.org_id = $1 order by p.seq desc limit $2',
        values: ['org-micro', 11],
      })
    ).rows;
  // Warm-up: connections opened, statements prepared, code optimised.
  if (process.env.ONLY !== 'herald') await run(rawPage);
  await run(heraldPage);
  const results: { raw: number[]; herald: number[] } = { raw: [], herald: [] };
  for (let round = 0; round < rounds; round++) {
    results.raw.push(process.env.ONLY === 'herald' ? 1 : await run(rawPage));
    results.herald.push(await run(heraldPage));
    const last = (list: number[]) => list[list.length - 1]!.toFixed(1);
    process.stdout.write(
      `round ${round + 1}: raw ${last(results.raw)} µs/page, herald ${last(results.herald)} µs/page\n`,
    );
  }
  const median = (list: number[]) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)]!;
  process.stdout.write(
    `median: raw ${median(results.raw).toFixed(1)}, herald ${median(results.herald).toFixed(1)} µs CPU/page (${columns}); ×raw ${(median(results.herald) / median(results.raw)).toFixed(2)}\n`,
  );
} finally {
  await raw.end();
  await herald.close();
  await sql`drop schema ${sql.id(schema)} cascade`.execute(admin.db);
  await admin.close();
}
