import { createTestSchema, type TestSchema } from '@herald/testing';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createDatabase, type HeraldDatabase } from './create-database.js';
import { migrateToLatest } from './migrate.js';
import { findPostById, insertPostWithAuthor, listPostsByOrg } from './posts.js';

// One connection per pool, so `pg_prepared_statements` (per session) shows what that pool prepared.
let schema: TestSchema;
let prepared: HeraldDatabase;
let unprepared: HeraldDatabase;

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  prepared = await createDatabase({ kind: 'postgres', url: schema.url, poolMax: 1, preparedStatements: true });
  unprepared = await createDatabase({ kind: 'postgres', url: schema.url, poolMax: 1 });
  await migrateToLatest(prepared.db);
});

afterAll(async () => {
  await prepared?.close();
  await unprepared?.close();
  await schema?.drop();
});

async function preparedTexts(database: HeraldDatabase): Promise<string[]> {
  const { rows } = await sql<{ statement: string }>`select statement from pg_prepared_statements`.execute(database.db);
  return rows.map((row) => row.statement);
}

describe('prepared statements (PostgreSQL)', () => {
  it('prepares the posts page once per connection and answers the same rows with it', async () => {
    const post = await insertPostWithAuthor(prepared.db, {
      orgId: 'org-prep',
      authorId: 'ada',
      authorName: 'Ada',
      title: 'Prepared',
      tags: ['a'],
    });
    const first = await listPostsByOrg(prepared.db, { orgId: 'org-prep', limit: 10 });
    const second = await listPostsByOrg(prepared.db, { orgId: 'org-prep', limit: 10 });
    expect(second).toEqual(first);
    expect(first).toEqual([{ ...post, author_name: 'Ada' }]);
    const pages = (await preparedTexts(prepared)).filter((text) => text.includes('"users"."name" as "author_name"'));
    expect(pages).toHaveLength(1);
  });

  it('never prepares a statement selecting `*` (its result shape would change with a migration)', async () => {
    await findPostById(prepared.db, 'nope');
    const texts = await preparedTexts(prepared);
    expect(texts.length).toBeGreaterThan(0);
    expect(texts.filter((text) => /select \*|returning \*/.test(text))).toEqual([]);
  });

  it('prepares a statement whose `*` only counts or multiplies, never one that selects `*`', async () => {
    await sql`select count(*)::int as n, ${2}::int * 3 as six from users where id <> ${'prep-count'}`.execute(
      prepared.db,
    );
    await sql`select * from users where id = ${'prep-star'}`.execute(prepared.db);
    await sql`select u.* from users u where id = ${'prep-dot-star'}`.execute(prepared.db);
    const texts = await preparedTexts(prepared);
    expect(texts.filter((text) => text.includes('as six'))).toHaveLength(1);
    expect(texts.filter((text) => /select \*|u\.\*/.test(text))).toEqual([]);
  });

  it('prepares nothing by default (preparedStatements unset)', async () => {
    await listPostsByOrg(unprepared.db, { orgId: 'org-prep', limit: 10 });
    expect(await preparedTexts(unprepared)).toEqual([]);
  });
});
