import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  checkPgliteInternals,
  MAX_PGLITE_PREPARED_STATEMENTS,
  PGLITE_VERSION,
  withPglitePreparedStatements,
} from './pglite-prepared-statements.js';

let pglite: PGlite;

beforeAll(async () => {
  pglite = withPglitePreparedStatements(await PGlite.create('memory://'));
  await pglite.exec(
    `create table items (id int primary key, name text not null, tags text[], at timestamptz, doc jsonb)`,
  );
});

afterAll(async () => {
  await pglite?.close();
});

/** The statements the embedded backend holds prepared, by text. */
const prepared = async () =>
  (await pglite.query<{ statement: string }>('select statement from pg_prepared_statements')).rows.map(
    (row) => row.statement,
  );

describe('PGlite prepared statements', () => {
  const INSERT =
    'insert into items (id, name, tags, at, doc) values ($1, $2, $3, $4, $5) returning id, name, tags, at, doc';
  const SELECT = 'select id, name, tags, at, doc from items where id = $1';

  it('prepares a statement with parameters once and answers as PGlite does, types included', async () => {
    const at = new Date('2026-11-26T12:00:00.123Z');
    const first = await pglite.query(INSERT, [1, 'one', ['a', 'b'], at, { k: [1] }]);
    const second = await pglite.query(INSERT, [2, 'two', null, null, null]);
    expect(first.rows).toEqual([{ id: 1, name: 'one', tags: ['a', 'b'], at, doc: { k: [1] } }]);
    expect(second.rows).toEqual([{ id: 2, name: 'two', tags: null, at: null, doc: null }]);
    expect(first.affectedRows).toBe(1);
    expect(first.fields.map((field) => field.name)).toEqual(['id', 'name', 'tags', 'at', 'doc']);
    expect((await pglite.query(SELECT, [1])).rows).toEqual(first.rows);
    expect((await pglite.query(SELECT, [3])).rows).toEqual([]);
    const statements = await prepared();
    expect(statements.filter((text) => text === INSERT)).toHaveLength(1);
    expect(statements.filter((text) => text === SELECT)).toHaveLength(1);
  });

  it('reports a failing execution as PGlite does, and the next statement runs', async () => {
    const failure = await pglite.query(INSERT, [1, 'again', null, null, null]).catch((error: unknown) => error);
    expect(failure).toMatchObject({ code: '23505', query: INSERT, params: [1, 'again', null, null, null] });
    expect((await pglite.query(SELECT, [2])).rows).toHaveLength(1);
  });

  it('keeps a transaction open across prepared statements, and a failure inside it aborts it', async () => {
    await pglite.query('begin');
    await pglite.query(INSERT, [10, 'in a transaction', null, null, null]);
    expect(pglite.isInTransaction()).toBe(true);
    await expect(pglite.query(INSERT, [10, 'duplicate', null, null, null])).rejects.toMatchObject({ code: '23505' });
    await expect(pglite.query(SELECT, [10])).rejects.toMatchObject({ code: '25P02' });
    await pglite.query('rollback');
    expect((await pglite.query(SELECT, [10])).rows).toEqual([]);
  });

  it('leaves `select *`, parameterless and unpreparable statements to PGlite', async () => {
    const star = 'select * from items where id = $1';
    expect((await pglite.query(star, [1])).rows).toHaveLength(1);
    await expect(pglite.query('select nope from items where id = $1', [1])).rejects.toMatchObject({
      code: '42703',
      query: 'select nope from items where id = $1',
    });
    expect((await pglite.query('select count(*)::int as n from items')).rows).toEqual([{ n: 2 }]);
    const statements = await prepared();
    expect(statements).not.toContain(star);
    expect(statements.some((text) => text.includes('nope'))).toBe(false);
    expect(statements.length).toBeLessThanOrEqual(MAX_PGLITE_PREPARED_STATEMENTS);
  });
});

describe("PGlite's internals", () => {
  it('the installed PGlite is the version the prepared path was written for', () => {
    const require = createRequire(import.meta.url);
    // The package's `exports` hide package.json: found beside its resolved entry point.
    const entry = require.resolve('@electric-sql/pglite');
    const manifestPath = `${entry.slice(0, entry.lastIndexOf('/node_modules/@electric-sql/pglite/'))}/node_modules/@electric-sql/pglite/package.json`;
    const manifest = JSON.parse(readFileSync(manifestPath, 'utf8')) as { name: string; version: string };
    expect(manifest).toMatchObject({ name: '@electric-sql/pglite', version: PGLITE_VERSION });
    const declared = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    expect(declared.dependencies['@electric-sql/pglite']).toBe(PGLITE_VERSION);
  });

  it('finds what the prepared path calls, and names what is missing', () => {
    expect(checkPgliteInternals(pglite)).toBeUndefined();
    // As after an upgrade that renamed the lock.
    const renamed = new Proxy(pglite, {
      get: (target, key, receiver) => (key === '_runExclusiveQuery' ? undefined : Reflect.get(target, key, receiver)),
    });
    expect(checkPgliteInternals(renamed)).toBe('PGlite has no _runExclusiveQuery()');
  });

  it('when one is missing: says why once, and leaves PGlite to run every statement unnamed', async () => {
    const plain = await PGlite.create('memory://');
    try {
      const reasons: string[] = [];
      const wrapped = withPglitePreparedStatements(plain, {
        check: () => 'PGlite has no _runExclusiveQuery()',
        onFallback: (reason) => reasons.push(reason),
      });
      expect(reasons).toEqual(['PGlite has no _runExclusiveQuery()']);
      await wrapped.exec('create table t (id int primary key)');
      await wrapped.query('insert into t (id) values ($1)', [1]);
      expect((await wrapped.query('select id from t where id = $1', [1])).rows).toEqual([{ id: 1 }]);
      const statements = await wrapped.query('select statement from pg_prepared_statements');
      expect(statements.rows).toEqual([]);
    } finally {
      await plain.close();
    }
  });
});
