import { currentStretch, inStretch, isTracing } from '@herald/telemetry';
import type { PostgresCursor, PostgresPool, PostgresPoolClient, PostgresQueryResult } from 'kysely';
import pg from 'pg';
import { createStatementNames } from './prepared-statements.js';
import { type DeadlineOwner, isExemptFromQueryTimeout, QueryDeadlines } from './query-timeout.js';

export interface DialectPoolOptions {
  /** Client-side deadline per query in ms (0: none); see query-timeout.ts. */
  queryTimeoutMs: number;
  /** Send statements with parameters as named prepared statements; see prepared-statements.ts. */
  preparedStatements: boolean;
}

/**
 * The pool Kysely's PostgresDialect gets: node-postgres' pool, with each pooled connection wrapped ONCE
 * (a {@link PooledConnection} lives as long as its `pg.Client`) to add the query deadline and the
 * prepared-statement names. Kysely keeps its own connection object per client it sees, so a stable
 * wrapper also spares it one per query (before: a wrapper object per checkout, and so a new Kysely
 * connection object per query). Measured alone (bench/micro/posts-page-micro.ts) this and the deadline sweep
 * were within noise; building pg's Query from the text (below) paid.
 */
export function createDialectPool(pool: pg.Pool, options: DialectPoolOptions): PostgresPool {
  if (options.queryTimeoutMs <= 0 && !options.preparedStatements && !isTracing()) return pool;
  const shared: Shared = {
    deadlines: options.queryTimeoutMs > 0 ? new QueryDeadlines(options.queryTimeoutMs) : undefined,
    nameOf: options.preparedStatements ? createStatementNames() : undefined,
  };
  const connections = new WeakMap<pg.PoolClient, PooledConnection>();
  const wrap = (client: pg.PoolClient): PooledConnection => {
    let connection = connections.get(client);
    if (connection === undefined) {
      connection = new PooledConnection(client, shared);
      connections.set(client, connection);
    }
    // No operation but the one this checkout is made by (`checkedOutBy`), whatever a release missed.
    connection.operation = undefined;
    return connection;
  };
  return {
    connect: () => {
      // A traced operation checking a connection out in its stretch (@herald/telemetry's `inStretch`: the
      // HTTP fast path's queries) gives it to the connection's queries, which run after the checkout's
      // await, out of that stretch. Kysely calls `connect` in the same synchronous run as `execute()`.
      const operation = currentStretch();
      if (operation === undefined) return pool.connect().then(wrap);
      return pool.connect().then((client) => wrap(client).checkedOutBy(operation));
    },
    end: () => pool.end(),
  };
}

/** The operation a connection was checked out by (@herald/telemetry's stretch). */
type Operation = NonNullable<ReturnType<typeof currentStretch>>;

interface Shared {
  deadlines: QueryDeadlines | undefined;
  nameOf: ((text: string, values: readonly unknown[]) => string | undefined) | undefined;
}

/** node-postgres' Query takes a callback as its third argument (its typings omit it). */
const Query = pg.Query as unknown as new (text: string, values: unknown[], callback: QueryCallback) => pg.Query;

type QueryCallback = (error: Error | null, result: pg.QueryResult) => void;

/** One pooled connection as Kysely sees it, for the connection's whole life. */
class PooledConnection implements PostgresPoolClient, DeadlineOwner {
  /**
   * Set when a query of the current checkout ran past its deadline: the connection still waits for that
   * answer, so later queries fail at once and `release` closes it (node-postgres opens a fresh one).
   */
  timedOut: Error | undefined;
  /** The traced operation that checked this connection out in its stretch, until `release`. */
  operation: Operation | undefined;

  constructor(
    readonly client: pg.PoolClient,
    readonly shared: Shared,
  ) {}

  checkedOutBy(operation: Operation): this {
    this.operation = operation;
    return this;
  }

  query<R>(sql: string, parameters: ReadonlyArray<unknown>): Promise<PostgresQueryResult<R>>;
  query<R>(cursor: PostgresCursor<R>): PostgresCursor<R>;
  query(text: string | PostgresCursor<unknown>, parameters?: ReadonlyArray<unknown>): unknown {
    const { operation } = this;
    // In the operation's stretch: the pg instrumentation's span for it is that operation's child.
    if (operation !== undefined) return inStretch(operation, () => this.send(text, parameters));
    return this.send(text, parameters);
  }

  send(text: string | PostgresCursor<unknown>, parameters: ReadonlyArray<unknown> | undefined): unknown {
    // A cursor (Kysely's `stream()`) passes through untouched, without a deadline, as it always did.
    if (typeof text !== 'string') return this.client.query(text as never);
    // Kysely hands over a fresh array of its own (PostgresConnection copies the parameters).
    const values = (parameters ?? []) as unknown[];
    const name = this.shared.nameOf?.(text, values);
    const { deadlines } = this.shared;
    if (deadlines === undefined || isExemptFromQueryTimeout()) {
      return this.client.query(name === undefined ? { text, values } : { name, text, values });
    }
    if (this.timedOut !== undefined) return Promise.reject(this.timedOut);
    return new Promise<pg.QueryResult>((resolve, reject) => {
      const pending = deadlines.add(this, reject);
      // node-postgres' own Query, made from the text (a config object would be copied property by
      // property: `cloneQueryConfig`) with a callback (no promise and `.catch` of its own), then named:
      // ~4 µs of a posts page. prepared-statements.test.ts checks the name still prepares.
      // The callback stays anonymous: a named closure gets esbuild's `__name` (keepNames, as tsx and
      // the production bundle build) — a defineProperty on every query.
      const query = new Query(text, values, (error, result) => {
        // Already expired: the promise was rejected, and this late answer (or the "connection
        // terminated" of the closed connection) is dropped.
        if (!deadlines.settle(pending)) return;
        if (error) reject(error);
        else resolve(result);
      }) as pg.Query & { name?: string };
      if (name !== undefined) query.name = name;
      this.client.query(query);
    });
  }

  release(): void {
    const { timedOut } = this;
    this.timedOut = undefined;
    this.operation = undefined;
    this.client.release(timedOut);
  }
}
