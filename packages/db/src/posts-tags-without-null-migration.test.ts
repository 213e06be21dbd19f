import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { HeraldDatabase } from './create-database.js';
import type { Database } from './database.js';
import { migrateTestDatabaseTo, testBackends } from './testing.js';

// A post's tags hold no NULL, so the `post.published` body the publish statement builds from the row
// always has a string for every tag, as its schema says. Migrating drops a NULL tag already there,
// keeping the others in order; afterwards the database refuses one, by the constraint's name.

const BEFORE = '2026-12-01T00-30_webhook-org-order-index';
const MIGRATION = '2026-12-01T06-00_posts-tags-without-null';

const backends = testBackends(() => inject('databaseUrl'));

describe.each(backends)('the posts-tags-without-null migration on $name', ({ openMigrated }) => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;

  beforeAll(async () => {
    ({ database, db } = await openMigrated(BEFORE));
    await sql`insert into users (id, name) values ('user_tags', 'Ada')`.execute(db);
    await sql`insert into posts (id, org_id, author_id, title, tags) values
      ('post_nulls', 'org-tags', 'user_tags', 'With nulls', array['a', null, 'b', null]::text[]),
      ('post_clean', 'org-tags', 'user_tags', 'Clean', array['c']::text[]),
      ('post_only_null', 'org-tags', 'user_tags', 'Only null', array[null]::text[])`.execute(db);
    await migrateTestDatabaseTo(db, MIGRATION);
  });

  afterAll(() => database.close());

  const tags = async () =>
    Object.fromEntries(
      (await db.selectFrom('posts').select(['id', 'tags']).orderBy('id').execute()).map((row) => [row.id, row.tags]),
    );

  it('drops the NULL tags already written and keeps the others in order', async () => {
    expect(await tags()).toEqual({ post_clean: ['c'], post_nulls: ['a', 'b'], post_only_null: [] });
  });

  it('then refuses a NULL tag, on insert and on update, and changes nothing', async () => {
    const insert = sql`insert into posts (id, org_id, author_id, title, tags)
      values ('post_refused', 'org-tags', 'user_tags', 'Refused', array['x', null]::text[])`.execute(db);
    await expect(insert).rejects.toThrow(/posts_tags_without_null/);
    const update = sql`update posts set tags = array['d', null]::text[] where id = 'post_clean'`.execute(db);
    await expect(update).rejects.toThrow(/posts_tags_without_null/);
    expect(await tags()).toEqual({ post_clean: ['c'], post_nulls: ['a', 'b'], post_only_null: [] });
  });

  it('lets a NULL tag in again on the way down', async () => {
    await migrateTestDatabaseTo(db, BEFORE);
    await sql`update posts set tags = array['d', null]::text[] where id = 'post_clean'`.execute(db);
    expect((await tags()).post_clean).toEqual(['d', null]);
  });
});
