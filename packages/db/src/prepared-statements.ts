import type { PostgresPool, PostgresPoolClient } from 'kysely';
import type pg from 'pg';

/** Distinct statements prepared per pool; later ones run unnamed (as every statement did before). */
export const MAX_PREPARED_STATEMENTS = 200;

/**
 * A `*` standing for a table's columns (`select *`, `select t.*`, `returning *`, `, *`): such a
 * statement's result shape follows the table's. A `*` that multiplies or counts (`count(*)`, `x * y`)
 * does not, so a statement with only those is prepared.
 */
export const SELECTS_ALL_COLUMNS = /\b(?:select|returning)\s+(?:distinct\s+)?\*|\.\*|,\s*\*/i;

/**
 * The pool Kysely's PostgresDialect gets: the same connections, but each statement with parameters is
 * sent as a named prepared statement (node-postgres `{ name, text, values }`), so PostgreSQL parses
 * and plans it once per connection instead of on every request (the posts page's join, publishPost's
 * CTE). Kysely sends the same SQL text for the same query shape, so the hot statements are few.
 *
 * Left unnamed: statements without parameters (`begin`, `commit`, `select 1`), statements selecting
 * `*` (a prepared `select *` / `returning *` fails with "cached plan must not change result type" once a
 * migration adds a column, e.g. an older pod during a rolling deploy), and every statement past the
 * first {@link MAX_PREPARED_STATEMENTS} distinct texts (queries whose text grows with a list).
 */
export function withPreparedStatements(pool: pg.Pool): PostgresPool {
  const names = new Map<string, string>();
  const nameOf = (text: string): string | undefined => {
    let name = names.get(text);
    if (name === undefined && names.size < MAX_PREPARED_STATEMENTS && !SELECTS_ALL_COLUMNS.test(text)) {
      name = `herald_${names.size + 1}`;
      names.set(text, name);
    }
    return name;
  };
  const connect = async (): Promise<PostgresPoolClient> => {
    const client = await pool.connect();
    const query = (text: unknown, values?: readonly unknown[]) => {
      if (typeof text === 'string' && values !== undefined && values.length > 0) {
        const name = nameOf(text);
        if (name !== undefined) return client.query({ name, text, values: [...values] });
      }
      // Anything else (a cursor for `stream()`, a statement left unnamed) goes through as Kysely sent it.
      return client.query(text as string, values as unknown[] | undefined);
    };
    return {
      query: query as unknown as PostgresPoolClient['query'],
      release: () => client.release(),
    };
  };
  return { connect, end: () => pool.end() };
}
