/** Distinct statements prepared per pool; later ones run unnamed (as every statement did before). */
export const MAX_PREPARED_STATEMENTS = 200;

/**
 * A `*` standing for a table's columns (`select *`, `select t.*`, `returning *`, `, *`): such a
 * statement's result shape follows the table's. A `*` that multiplies or counts (`count(*)`, `x * y`)
 * does not, so a statement with only those is prepared.
 */
export const SELECTS_ALL_COLUMNS = /\b(?:select|returning)\s+(?:distinct\s+)?\*|\.\*|,\s*\*/i;

/**
 * The names under which one pool's statements are prepared (dialect-pool.ts sends a statement with a
 * name as node-postgres `{ name, text, values }`), so PostgreSQL parses and plans it once per connection
 * instead of on every request (the posts page's join, publishPost's CTE). Kysely sends the same SQL text
 * for the same query shape, so the hot statements are few.
 *
 * Left unnamed (`undefined`): statements without parameters (`begin`, `commit`, `select 1`), statements
 * selecting `*` (a prepared `select *` / `returning *` fails with "cached plan must not change result
 * type" once a migration adds a column, e.g. an older pod during a rolling deploy), and every statement
 * past the first {@link MAX_PREPARED_STATEMENTS} distinct texts (queries whose text grows with a list).
 */
export function createStatementNames(): (text: string, values: readonly unknown[]) => string | undefined {
  const names = new Map<string, string>();
  return (text, values) => {
    if (values.length === 0) return undefined;
    let name = names.get(text);
    if (name === undefined && names.size < MAX_PREPARED_STATEMENTS && !SELECTS_ALL_COLUMNS.test(text)) {
      name = `herald_${names.size + 1}`;
      names.set(text, name);
    }
    return name;
  };
}
