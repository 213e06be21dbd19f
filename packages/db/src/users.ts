import type { Kysely } from 'kysely';
import type { Database, User } from './database.js';

/**
 * Records the user a token names (id and display name) so posts can reference their author.
 * Called on writes only; a changed `name` claim updates the stored name.
 */
export async function upsertUser(db: Kysely<Database>, user: { id: string; name: string }): Promise<User> {
  return db
    .insertInto('users')
    .values({ id: user.id, name: user.name })
    .onConflict((oc) =>
      oc
        .column('id')
        .doUpdateSet({ name: user.name, updated_at: new Date() })
        .where('users.name', 'is distinct from', user.name),
    )
    .returningAll()
    .executeTakeFirst()
    .then(async (row) => row ?? db.selectFrom('users').selectAll().where('id', '=', user.id).executeTakeFirstOrThrow());
}
