/**
 * A client-side deadline for every PostgreSQL query, so a server that stops answering without closing its
 * connections (frozen, a network partition that drops packets, a failover stuck half-way) turns into a
 * clear, retryable "database unavailable" error instead of requests that hang for ever.
 *
 * `statement_timeout` cannot do this: a frozen server enforces nothing, and TCP keep-alive sees nothing
 * wrong while the kernel still acknowledges. node-postgres has `query_timeout` for it, but after it fires
 * the connection still waits for the answer to the abandoned query; Kysely hands connections back to the
 * pool without an error, so every later query on that connection would wait behind it. This wrapper gives
 * each query the deadline and returns a timed-out connection to the pool *with* the error, which makes
 * node-postgres close it and open a fresh one for the next query.
 *
 * Migrations run without the deadline ({@link withoutQueryTimeout}): they may wait for another pod's
 * migration lock or build an index on a large table, and a pod that cannot migrate does not start anyway.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type pg from 'pg';

/** The message node-postgres gives a query that ran past `query_timeout`. */
export const QUERY_TIMEOUT_MESSAGE = 'Query read timeout';

const exempt = new AsyncLocalStorage<true>();
/** `withoutQueryTimeout` calls in progress. */
let exemptRuns = 0;

/**
 * Runs `work` with no query deadline for the queries it makes (migrations).
 *
 * An enabled AsyncLocalStorage makes Node run a hook for every promise the process creates, for as long
 * as it stays enabled (~0.5 µs per `await` on Node 20, dozens per HTTP request). So once the last run
 * ends the storage is disabled again (`run` enables it anew): the API pays for it only while it migrates.
 */
export async function withoutQueryTimeout<T>(work: () => Promise<T>): Promise<T> {
  exemptRuns++;
  try {
    return await exempt.run(true, work);
  } finally {
    if (--exemptRuns === 0) exempt.disable();
  }
}

/** The subset of `pg.Pool` Kysely's PostgresDialect uses. */
interface DialectPool {
  connect(): Promise<pg.PoolClient>;
  end(): Promise<void>;
}

/**
 * Wraps `pool` so each plain-text query gets `timeoutMs` (0: none) and a client whose query timed out is
 * released with the error (closed) instead of being reused.
 */
export function poolWithQueryTimeout(pool: pg.Pool, timeoutMs: number): DialectPool {
  if (timeoutMs <= 0) return pool;
  return {
    end: () => pool.end(),
    async connect() {
      const client = await pool.connect();
      let timedOut: Error | undefined;
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
      const wrapped = Object.create(client) as pg.PoolClient;
      wrapped.query = ((text: unknown, values?: unknown) => {
        if (exempt.getStore()) return query(text, values);
        let config: pg.QueryConfig & { query_timeout: number };
        if (typeof text === 'string') config = { text, values: values as unknown[], query_timeout: timeoutMs };
        // A `{ name, text, values }` config (prepared-statements.ts) keeps its name and gets the deadline.
        else if (isQueryConfig(text)) config = { ...text, query_timeout: timeoutMs };
        // Cursors (streaming: `submit`) pass through untouched.
        else return query(text, values);
        return query(config).catch((error: unknown) => {
          if (error instanceof Error && error.message === QUERY_TIMEOUT_MESSAGE) timedOut = error;
          throw error;
        });
      }) as pg.PoolClient['query'];
      wrapped.release = (error?: Error | boolean) => client.release(error ?? timedOut);
      return wrapped;
    },
  };
}

function isQueryConfig(value: unknown): value is pg.QueryConfig {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { text?: unknown }).text === 'string' &&
    typeof (value as { submit?: unknown }).submit !== 'function'
  );
}
