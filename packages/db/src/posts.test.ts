import type { TestSchema } from '@herald/testing';
import { type Kysely, type KyselyPlugin, type MigrationResult, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createAuthorLoader } from './author-loader.js';
import { createDatabase, type HeraldDatabase } from './create-database.js';
import type { Database } from './database.js';
import { migrateToLatest } from './migrate.js';
import { findPostById, insertPost, insertPostWithAuthor, listPostsByOrg, POST_PAGE_COLUMNS } from './posts.js';
import { testBackends } from './testing.js';
import { upsertUser } from './users.js';

/** Counts the queries Kysely sends, to prove batching. */
function queryCounter(): KyselyPlugin & { count: number; results: number } {
  return {
    count: 0,
    results: 0,
    transformQuery(args) {
      this.count += 1;
      return args.node;
    },
    async transformResult(args) {
      this.results += 1;
      return args.result;
    },
  };
}

const backends = testBackends(() => inject('databaseUrl'));

describe.each(backends)('data layer on $name', ({ name, openMigrated }) => {
  let database: HeraldDatabase;
  let schema: TestSchema | undefined;
  let db: Kysely<Database>;

  beforeAll(async () => {
    let migrations: MigrationResult[];
    ({ database, schema, db, migrations } = await openMigrated());
    expect(migrations.length).toBeGreaterThan(0);
    expect(migrations.every((result) => result.status === 'Success')).toBe(true);
  });

  afterAll(async () => {
    await database.close();
    await schema?.drop();
  });

  it('running migrations again is a no-op', async () => {
    expect(await migrateToLatest(db)).toEqual([]);
  });

  it('stores a post with its tags and reads it back as a draft', async () => {
    await upsertUser(db, { id: 'u1', name: 'Ada' });
    const post = await insertPost(db, { orgId: 'org-a', authorId: 'u1', title: 'Hello', tags: ['a', 'b', 'a'] });
    expect(post).toMatchObject({
      org_id: 'org-a',
      title: 'Hello',
      tags: ['a', 'b'],
      status: 'DRAFT',
      published_at: null,
    });
    expect(await findPostById(db, post.id)).toEqual(post);
  });

  it('upsertUser keeps one row per user and follows a changed name', async () => {
    await upsertUser(db, { id: 'u-rename', name: 'Old' });
    await upsertUser(db, { id: 'u-rename', name: 'Old' });
    const renamed = await upsertUser(db, { id: 'u-rename', name: 'New' });
    expect(renamed.name).toBe('New');
    const rows = await db.selectFrom('users').selectAll().where('id', '=', 'u-rename').execute();
    expect(rows).toHaveLength(1);
  });

  it('refuses a post whose author does not exist', async () => {
    await expect(insertPost(db, { orgId: 'org-a', authorId: 'nobody', title: 'x', tags: [] })).rejects.toThrow();
  });

  it('pages an organisation newest first and never mixes in another organisation', async () => {
    await upsertUser(db, { id: 'pager', name: 'P' });
    const made = [];
    for (let i = 0; i < 5; i++) {
      made.push(await insertPost(db, { orgId: 'org-page', authorId: 'pager', title: `p${i}`, tags: [] }));
    }
    await insertPost(db, { orgId: 'org-other', authorId: 'pager', title: 'foreign', tags: [] });

    const first = await listPostsByOrg(db, { orgId: 'org-page', limit: 2 });
    expect(first.map((post) => post.title)).toEqual(['p4', 'p3']);
    const next = await listPostsByOrg(db, { orgId: 'org-page', limit: 10, afterSeq: String(first[1]?.seq) });
    expect(next.map((post) => post.title)).toEqual(['p2', 'p1', 'p0']);
  });

  it("reads only the page's columns with columns: 'page', the same posts as every column, in every direction", async () => {
    await upsertUser(db, { id: 'lister', name: 'L' });
    for (let i = 0; i < 6; i++) {
      await insertPost(db, { orgId: 'org-columns', authorId: 'lister', title: `c${i}`, tags: [`t${i}`] });
    }
    const all = await listPostsByOrg(db, { orgId: 'org-columns', limit: 10 });
    const middle = { afterSeq: String(all[0]!.seq), beforeSeq: String(all[5]!.seq) };
    for (const bounds of [{}, { afterSeq: middle.afterSeq }, { beforeSeq: middle.beforeSeq }, middle]) {
      for (const inverted of [false, true]) {
        const query = { orgId: 'org-columns', limit: 3, inverted, ...bounds };
        const page = await listPostsByOrg(db, { ...query, columns: 'page' });
        const full = await listPostsByOrg(db, query);
        expect(page.length).toBeGreaterThan(0);
        expect(page).toEqual(
          // `seq` as text on both backends (PGlite's driver reads int8 as a number; node-postgres as text).
          full.map(({ id, title, tags, seq, author_name }) => ({ id, title, tags, seq: String(seq), author_name })),
        );
        expect(Object.keys(page[0]!).sort()).toEqual([...POST_PAGE_COLUMNS, 'author_name'].sort());
      }
    }
  });

  it("a 'page' read keeps every character of titles, tags and author names, and an organisation without posts is an empty page", async () => {
    const awkward = [
      '"quoted"',
      'back\\slash',
      '{braces}',
      'a,b',
      'NULL',
      '',
      ' spaced ',
      'ünïcødé ✓ 🎉',
      'line\nbreak',
      '\t',
    ];
    await upsertUser(db, { id: 'awkward', name: 'Zoë "Z" \\ O\'Brien' });
    for (const [i, text] of awkward.entries()) {
      await insertPost(db, { orgId: 'org-awkward', authorId: 'awkward', title: `${text}${i}`, tags: [text, `${i}`] });
    }
    const page = await listPostsByOrg(db, { orgId: 'org-awkward', limit: 20, columns: 'page' });
    const full = await listPostsByOrg(db, { orgId: 'org-awkward', limit: 20 });
    expect(page.map((post) => post.title)).toEqual(awkward.map((text, i) => `${text}${i}`).reverse());
    expect(page).toEqual(
      full.map(({ id, title, tags, seq, author_name }) => ({ id, title, tags, seq: String(seq), author_name })),
    );
    expect(await listPostsByOrg(db, { orgId: 'org-without-posts', limit: 5, columns: 'page' })).toEqual([]);
  });

  it('reads a page inside a transaction on the transaction, and through the plugins of a Kysely withPlugin', async () => {
    await upsertUser(db, { id: 'trx-reader', name: 'T' });
    await db.transaction().execute(async (trx) => {
      await insertPost(trx, { orgId: 'org-trx', authorId: 'trx-reader', title: 'uncommitted', tags: [] });
      // The page read inside the transaction sees its own insert (it runs on the transaction's connection)…
      expect((await listPostsByOrg(trx, { orgId: 'org-trx', limit: 5, columns: 'page' })).length).toBe(1);
    });
    const counter = queryCounter();
    const counted = db.withPlugin(counter);
    expect((await listPostsByOrg(counted, { orgId: 'org-trx', limit: 5, columns: 'page' })).length).toBe(1);
    // …and a Kysely made withPlugin still sees the page's result (the direct read is for `db` itself).
    expect(counter.results).toBe(1);
  });

  it('inserts a draft and its new author in one statement, and follows a changed author name', async () => {
    const first = await insertPostWithAuthor(db, {
      orgId: 'org-new',
      authorId: 'newcomer',
      authorName: 'New',
      title: 'First',
      tags: ['a', 'a', 'b'],
    });
    expect(first).toMatchObject({ org_id: 'org-new', author_id: 'newcomer', title: 'First', tags: ['a', 'b'] });
    expect(first.status).toBe('DRAFT');
    await insertPostWithAuthor(db, {
      orgId: 'org-new',
      authorId: 'newcomer',
      authorName: 'Renamed',
      title: 'Second',
      tags: [],
    });
    const loader = createAuthorLoader(db);
    expect(await loader.load('newcomer')).toEqual({ id: 'newcomer', name: 'Renamed' });
  });

  // The embedded backend always prepares statements with parameters (pglite-prepared-statements.ts).
  (name === 'embedded PGlite' ? it : it.skip)(
    'sends createPost as a statement that can be prepared (no `returning *`)',
    async () => {
      for (const title of ['one', 'two'])
        await insertPostWithAuthor(db, { orgId: 'org-prep', authorId: 'preparer', authorName: 'P', title, tags: [] });
      const { rows } = await sql<{ statement: string }>`select statement from pg_prepared_statements`.execute(db);
      expect(rows.filter((row) => row.statement.includes('insert into posts'))).toHaveLength(1);
    },
  );

  it('loads the authors of many posts with one query', async () => {
    for (const id of ['a1', 'a2', 'a3']) await upsertUser(db, { id, name: id.toUpperCase() });
    const counter = queryCounter();
    const loader = createAuthorLoader(db.withPlugin(counter));
    const authors = await Promise.all(['a1', 'a2', 'a3', 'a1', 'missing'].map((id) => loader.load(id)));
    expect(authors.map((author) => author?.name ?? null)).toEqual(['A1', 'A2', 'A3', 'A1', null]);
    expect(counter.count).toBe(1);
  });

  it('answers ping while open', async () => {
    await expect(database.ping()).resolves.toBeUndefined();
  });
});

describe('embedded PGlite on disk', () => {
  it('keeps rows across a close and reopen of the same data directory', async () => {
    const { mkdtemp, rm } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const dir = await mkdtemp(join(tmpdir(), 'herald-pglite-'));
    try {
      const first = await createDatabase({ kind: 'embedded', dataDir: dir });
      await migrateToLatest(first.db);
      await upsertUser(first.db, { id: 'keeper', name: 'K' });
      const post = await insertPost(first.db, { orgId: 'o', authorId: 'keeper', title: 'kept', tags: ['t'] });
      await first.close();

      const second = await createDatabase({ kind: 'embedded', dataDir: dir });
      expect(await migrateToLatest(second.db)).toEqual([]);
      expect((await findPostById(second.db, post.id))?.title).toBe('kept');
      await second.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
