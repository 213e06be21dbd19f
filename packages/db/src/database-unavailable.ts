/**
 * Which errors mean "the database is not there right now" (a failover, a restart, a dropped connection,
 * a pool that cannot connect in time) rather than "this query is wrong". Callers turn the former into
 * a retryable answer (HTTP 503, `SERVICE_UNAVAILABLE`) instead of an internal error.
 */

/**
 * SQLSTATE classes and codes that come from the server going away, not from the statement: class 08
 * (connection exception), 57P01 admin_shutdown (`pg_terminate_backend`, fast shutdown), 57P02
 * crash_shutdown, 57P03 cannot_connect_now (starting up, recovery), 53300 too_many_connections.
 */
const UNAVAILABLE_SQLSTATE = /^(08...|57P0[123]|53300)$/;
/** Node socket errors while connecting to or talking with the server. */
const UNAVAILABLE_ERRNO = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
/** node-postgres and PGlite report these as plain `Error`s with no code. */
const UNAVAILABLE_MESSAGES = [
  'Connection terminated', // "… unexpectedly", "… due to connection timeout"
  'timeout exceeded when trying to connect', // pool acquire timeout (connectionTimeoutMillis)
  'Client has encountered a connection error and is not queryable',
  'Query read timeout',
  'PGlite is closed',
];
/** How deep the `cause` / `originalError` chain is followed (GraphQL and Kysely wrap errors). */
const MAX_CAUSE_DEPTH = 5;

/** True when `error` (or what it wraps) says the database is unreachable or went away mid-query. */
export function isDatabaseUnavailableError(error: unknown): boolean {
  let current: unknown = error;
  for (let depth = 0; depth < MAX_CAUSE_DEPTH && current instanceof Error; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && (UNAVAILABLE_SQLSTATE.test(code) || UNAVAILABLE_ERRNO.has(code))) return true;
    if (current instanceof AggregateError && current.errors.some(isDatabaseUnavailableError)) return true;
    if (UNAVAILABLE_MESSAGES.some((message) => current instanceof Error && current.message.includes(message))) {
      return true;
    }
    current = (current as { originalError?: unknown }).originalError ?? current.cause;
  }
  return false;
}
