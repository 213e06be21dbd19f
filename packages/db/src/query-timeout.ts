/**
 * A client-side deadline for every PostgreSQL query, so a server that stops answering without closing its
 * connections (frozen, a network partition that drops packets, a failover stuck half-way) turns into a
 * clear, retryable "database unavailable" error instead of requests that hang for ever.
 *
 * `statement_timeout` cannot do this: a frozen server enforces nothing, and TCP keep-alive sees nothing
 * wrong while the kernel still acknowledges. node-postgres has `query_timeout` for it, but after it fires
 * the connection still waits for the answer to the abandoned query; Kysely hands connections back to the
 * pool without an error, so every later query on that connection would wait behind it. So each query gets
 * a deadline ({@link QueryDeadlines}), and a timed-out connection goes back to the pool *with* the error
 * (dialect-pool.ts), which makes node-postgres close it and open a fresh one for the next query.
 *
 * Migrations run without the deadline ({@link withoutQueryTimeout}): they may wait for another pod's
 * migration lock or build an index on a large table, and a pod that cannot migrate does not start anyway.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

/** The message node-postgres gives a query that ran past `query_timeout`. */
export const QUERY_TIMEOUT_MESSAGE = 'Query read timeout';

const exempt = new AsyncLocalStorage<true>();
/** Runs of {@link withoutQueryTimeout} not finished yet. */
let exemptRuns = 0;

/**
 * Runs `work` with no query deadline for the queries it makes (migrations).
 *
 * An enabled AsyncLocalStorage turns on Node's async hooks for the whole process (on Node 20): every
 * promise made afterwards, anywhere, runs an init hook and carries three extra properties (two async ids
 * and the store). Left on after the start-up migration, that cost every request and every WebSocket
 * subscription's pending promises ~300 B and CPU for the life of the pod (bench/results/PROFILE.md).
 * So the storage is disabled again once the last run ends; the next `run` re-enables it.
 */
export async function withoutQueryTimeout<T>(work: () => Promise<T>): Promise<T> {
  exemptRuns++;
  try {
    return await exempt.run(true, work);
  } finally {
    if (--exemptRuns === 0) exempt.disable();
  }
}

/** Whether the current query runs inside {@link withoutQueryTimeout} (a migration). */
export function isExemptFromQueryTimeout(): boolean {
  return exempt.getStore() === true;
}

/** The sweep runs at most this often (short deadlines, tests) … */
const MIN_SWEEP_INTERVAL_MS = 10;
/** … and at least this often: a query fails at most this long after its deadline. */
const MAX_SWEEP_INTERVAL_MS = 1_000;

/** What a query runs on: told when one of its queries timed out (it must then be closed, not reused). */
export interface DeadlineOwner {
  timedOut: Error | undefined;
}

/** One query in flight under a deadline. */
export interface PendingQuery {
  readonly deadline: number;
  readonly owner: DeadlineOwner;
  /** Fails the query's promise; called at most once, by the sweep, when the deadline passed. */
  readonly reject: (error: Error) => void;
}

/**
 * The deadlines of one pool's queries, enforced by ONE sweep timer rather than a timer per query
 * (node-postgres' `query_timeout` arms and clears a `setTimeout` for every query, and wraps its callback).
 * A query is registered when sent and removed when answered; the sweep, running every tenth of the
 * deadline (10 ms to 1 s) while anything is in flight, expires those past their deadline. So a query
 * fails between `timeoutMs` and `timeoutMs` + one sweep interval (≤ 10 %, at most 1 s) after
 * it was sent. The timer is unref'd and stops when nothing is in flight.
 */
export class QueryDeadlines {
  readonly #pending = new Set<PendingQuery>();
  readonly #sweepIntervalMs: number;
  #timer: NodeJS.Timeout | undefined;

  constructor(readonly timeoutMs: number) {
    this.#sweepIntervalMs = Math.min(MAX_SWEEP_INTERVAL_MS, Math.max(MIN_SWEEP_INTERVAL_MS, timeoutMs / 10));
  }

  /**
   * Registers a query sent now on `owner`. If it is still pending after the deadline, the sweep sets
   * `owner.timedOut` and calls `reject` with a "Query read timeout" error (isDatabaseUnavailableError).
   */
  add(owner: DeadlineOwner, reject: (error: Error) => void): PendingQuery {
    const pending: PendingQuery = { deadline: performance.now() + this.timeoutMs, owner, reject };
    this.#pending.add(pending);
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => this.#sweep(), this.#sweepIntervalMs);
      this.#timer.unref();
    }
    return pending;
  }

  /** The query was answered. @returns false when it had already expired (its answer must be dropped). */
  settle(pending: PendingQuery): boolean {
    return this.#pending.delete(pending);
  }

  #sweep(): void {
    const now = performance.now();
    for (const pending of this.#pending) {
      if (pending.deadline > now) continue;
      this.#pending.delete(pending);
      const error = new Error(QUERY_TIMEOUT_MESSAGE);
      pending.owner.timedOut = error;
      pending.reject(error);
    }
    if (this.#pending.size === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }
}
