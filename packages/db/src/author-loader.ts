import DataLoader from 'dataloader';
import type { Kysely } from 'kysely';
import type { Database, User } from './database.js';

export type AuthorLoader = DataLoader<string, User | null>;

/**
 * Batches author look-ups: every `load(id)` made in one tick becomes a single `where id in (…)`
 * query, so a page of N posts costs one query for its authors. Create one per request (and one per
 * subscription event): its cache must never outlive the operation it serves.
 */
export function createAuthorLoader(db: Kysely<Database>): AuthorLoader {
  return new DataLoader(async (ids) => {
    const rows = await db
      .selectFrom('users')
      .selectAll()
      .where('id', 'in', [...ids])
      .execute();
    const byId = new Map(rows.map((row) => [row.id, row]));
    return ids.map((id) => byId.get(id) ?? null);
  });
}
