import DataLoader from 'dataloader';
import type { Kysely } from 'kysely';
import type { Database, User } from './database.js';

/** What a post shows of its author. */
export type Author = Pick<User, 'id' | 'name'>;

export type AuthorLoader = DataLoader<string, Author | null>;

/**
 * Batches author look-ups: every `load(id)` made in one tick becomes a single `where id in (…)`
 * query, so a page of N posts costs one query for its authors. Create one per request (and one per
 * subscription event): its cache must never outlive the operation it serves. A query that already read
 * the authors (`listPostsByOrg`) primes it, and then no query is made at all.
 */
export function createAuthorLoader(db: Kysely<Database>): AuthorLoader {
  return new DataLoader(async (ids) => {
    const rows = await db
      .selectFrom('users')
      .select(['id', 'name'])
      .where('id', 'in', [...ids])
      .execute();
    const byId = new Map(rows.map((row) => [row.id, row]));
    return ids.map((id) => byId.get(id) ?? null);
  });
}
