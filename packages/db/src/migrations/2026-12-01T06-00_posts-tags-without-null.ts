import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// `posts_tags_without_null`: a post's tags hold no NULL. The `post.published` webhook body is built
// from the row by the publish statement, and its schema says every tag is a string: this makes the
// database keep that promise for rows written by hand too (GraphQL cannot write a NULL tag). A NULL
// tag already there carries nothing and is dropped first.

export async function up(db: Kysely<any>): Promise<void> {
  await sql`update posts set tags = array_remove(tags, null) where array_position(tags, null) is not null`.execute(db);
  await sql`alter table posts add constraint posts_tags_without_null check (array_position(tags, null) is null)`.execute(
    db,
  );
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table posts drop constraint posts_tags_without_null`.execute(db);
}
