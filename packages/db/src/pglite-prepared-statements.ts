import { type PGlite, parse, protocol, type QueryOptions, type Results } from '@electric-sql/pglite';
import { SELECTS_ALL_COLUMNS } from './prepared-statements.js';

/** Distinct statements prepared per PGlite instance; later ones run unnamed, as every statement did before. */
export const MAX_PGLITE_PREPARED_STATEMENTS = 200;

/**
 * The `@electric-sql/pglite` version this module was written and tested against (package.json pins it
 * exactly). Besides the public protocol API it calls PGlite's `_checkReady`, `_runExclusiveTransaction`
 * and `_runExclusiveQuery` (the locks its own `query` takes): an upgrade re-runs the tests named in
 * docs/development.md, "Upgrading dependencies".
 */
export const PGLITE_VERSION = '0.4.6';

/** What the prepared path calls on a PGlite instance, beyond its declared API. */
interface PgliteInternals {
  _checkReady(): Promise<void>;
  _runExclusiveTransaction<T>(fn: () => Promise<T>): Promise<T>;
  _runExclusiveQuery<T>(fn: () => Promise<T>): Promise<T>;
}

/**
 * Checks that `pglite` and PGlite's protocol helpers have everything the prepared path calls.
 * @returns undefined when all is there, else what is missing
 */
export function checkPgliteInternals(pglite: PGlite): string | undefined {
  const instance = pglite as unknown as Record<string, unknown>;
  for (const method of [
    '_checkReady',
    '_runExclusiveTransaction',
    '_runExclusiveQuery',
    'execProtocolStream',
    'isInTransaction',
    'syncToFs',
  ]) {
    if (typeof instance[method] !== 'function') return `PGlite has no ${method}()`;
  }
  if (typeof instance.serializers !== 'object' || typeof instance.parsers !== 'object')
    return 'PGlite has no serializers/parsers';
  for (const step of ['parse', 'describe', 'bind', 'execute', 'sync'] as const) {
    if (typeof protocol.serialize[step] !== 'function') return `PGlite's protocol.serialize has no ${step}()`;
  }
  if (typeof parse.parseDescribeStatementResults !== 'function' || typeof parse.parseResults !== 'function')
    return "PGlite's parse has no parseDescribeStatementResults()/parseResults()";
  return undefined;
}

export interface PglitePreparedStatementsOptions {
  /**
   * Told when PGlite's internals are not what this module needs: `query` is then left as PGlite's own
   * (every statement unnamed, planned on each call). @default nothing
   */
  onFallback?: (reason: string) => void;
  /** The internals check; tests replace it. @default {@link checkPgliteInternals} */
  check?: (pglite: PGlite) => string | undefined;
}

interface Prepared {
  /** The statement's name in the embedded backend. */
  name: string;
  /** Parameter type oids, as `Describe` reported them: each value is serialised for its type. */
  types: number[];
}

/**
 * Makes PGlite's `query(text, params)` (what Kysely's PGlite dialect calls) run each statement with
 * parameters as a named prepared statement: parsed, analysed and planned once per PGlite instance, then
 * only bound and executed. PGlite's own `query` sends every statement unnamed, so the embedded
 * backend plans it on every call, inside the API's event loop: the publishPost statement cost 1.1–1.9 ms of
 * CPU that way and 0.45–0.5 ms prepared (EXECUTE in a loop, PGlite 0.4.6).
 *
 * Hand-written on PGlite's public protocol API (`protocol.serialize`, `execProtocol`, `parse.parseResults`)
 * because PGlite offers no named statements: the same steps its `query` takes (parse and describe once;
 * then bind, describe, execute and sync in one message, under its query and transaction locks, then its
 * file-system sync outside a transaction), with the statement name added. Results, type parsing and errors
 * (`DatabaseError` with `query` and `params`) are PGlite's own.
 *
 * Left unnamed, through PGlite's `query` as before: statements without parameters, calls with query
 * options, statements selecting `*` (their result shape follows the table's; see prepared-statements.ts),
 * statements PGlite could not prepare (the unnamed call then raises the error), and every statement past the
 * first {@link MAX_PGLITE_PREPARED_STATEMENTS} distinct texts.
 *
 * This is the one module that reaches into PGlite: when {@link checkPgliteInternals} finds something
 * missing, `query` is left alone and `onFallback` is told why (the API logs one warning and sets
 * `herald_fast_path_fallback{path="pglite_statements"}` to 1).
 * @returns the same instance, its `query` replaced (or untouched, on a fallback)
 */
export function withPglitePreparedStatements(pglite: PGlite, options: PglitePreparedStatementsOptions = {}): PGlite {
  const missing = (options.check ?? checkPgliteInternals)(pglite);
  if (missing !== undefined) {
    options.onFallback?.(missing);
    return pglite;
  }
  const internals = pglite as unknown as PgliteInternals;
  const unnamed = pglite.query.bind(pglite) as PGlite['query'];
  /** Text → its prepared statement, or null when it is to run unnamed. */
  const statements = new Map<string, Prepared | null>();

  async function prepare(text: string): Promise<Prepared | null> {
    if (statements.size >= MAX_PGLITE_PREPARED_STATEMENTS || SELECTS_ALL_COLUMNS.test(text)) return null;
    const name = `herald_${statements.size + 1}`;
    try {
      await pglite.execProtocolStream(protocol.serialize.parse({ name, text }), { syncToFs: false });
      const described = await pglite.execProtocolStream(protocol.serialize.describe({ type: 'S', name }), {
        syncToFs: false,
      });
      return { name, types: parse.parseDescribeStatementResults(described) };
    } catch {
      // Not preparable (a syntax error, an unknown column…): the unnamed call reports it as PGlite does.
      return null;
    } finally {
      await pglite.execProtocolStream(protocol.serialize.sync(), { syncToFs: false, throwOnError: false });
    }
  }

  async function run<T>(statement: Prepared, text: string, params: unknown[]): Promise<Results<T>> {
    const values = params.map((param, index) => {
      if (param === null || param === undefined) return null;
      const serialize = pglite.serializers[statement.types[index] ?? 0];
      return serialize ? serialize(param) : String(param);
    });
    // One message: after an error the backend skips to the Sync, as for any pipelined batch.
    const message = concat([
      protocol.serialize.bind({ statement: statement.name, values }),
      protocol.serialize.describe({ type: 'P' }),
      protocol.serialize.execute({}),
      protocol.serialize.sync(),
    ]);
    const messages = await pglite.execProtocolStream(message, { syncToFs: false, throwOnError: false });
    const failure = messages.find((entry) => entry.name === 'error');
    if (failure) throw Object.assign(failure, { query: text, params });
    if (!pglite.isInTransaction()) await pglite.syncToFs();
    return parse.parseResults(messages, pglite.parsers)[0] as Results<T>;
  }

  const query = async <T>(text: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>> => {
    if (!params || params.length === 0 || options !== undefined || statements.get(text) === null)
      return unnamed<T>(text, params, options);
    await internals._checkReady();
    const result = await internals._runExclusiveTransaction(() =>
      internals._runExclusiveQuery(async () => {
        let statement = statements.get(text);
        if (statement === undefined) {
          statement = await prepare(text);
          statements.set(text, statement);
        }
        return statement
          ? { ran: true as const, result: await run<T>(statement, text, params) }
          : { ran: false as const };
      }),
    );
    return result.ran ? result.result : unnamed<T>(text, params, options);
  };
  pglite.query = query as PGlite['query'];
  return pglite;
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  const joined = new Uint8Array(parts.reduce((length, part) => length + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    joined.set(part, offset);
    offset += part.length;
  }
  return joined;
}
