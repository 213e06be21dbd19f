import { randomUUID } from 'node:crypto';
import type { Plugin } from 'graphql-yoga';
import type { Logger } from '../logger.js';

/** Header a proxy may set to correlate its logs with ours; echoed on every response. */
export const REQUEST_ID_HEADER = 'x-request-id';
/** A client-supplied id longer than this, or with odd characters, is replaced by a fresh one. */
const REQUEST_ID_PATTERN = /^[\w.:-]{1,128}$/;
/** Paths whose answers get no access-log line (probes every few seconds). */
const UNLOGGED_PATHS = new Set(['/health', '/readiness']);

/** One HTTP request's id, its logger and when it started. */
export interface RequestLog {
  readonly log: Logger;
  readonly requestId: string;
  readonly startedAt: number;
}

/**
 * A request's log whose child logger is made on first use: at `warn` most requests never log, and a
 * pino child (bindings serialised, redaction set up) was ~4 µs of a posts request.
 */
class RequestLogEntry implements RequestLog {
  #log: Logger | undefined;

  constructor(
    readonly requestId: string,
    readonly startedAt: number,
    readonly parent: Logger,
  ) {}

  get log(): Logger {
    this.#log ??= this.parent.child({ requestId: this.requestId });
    return this.#log;
  }
}

const loggers = new WeakMap<object, RequestLog>();

/** The logger bound to this request's id (the root logger for requests no one started a log for). */
export function requestLogger(request: object | undefined, fallback: Logger): Logger {
  return (request && loggers.get(request)?.log) ?? fallback;
}

/**
 * Starts `request`'s log: its id (the caller's `x-request-id` when well-formed, else a UUID) and a child
 * logger carrying it, found again by {@link requestLogger}. Shared by the Yoga plugin and the HTTP fast
 * path (http-fast-path.ts), so both answer with the same id rules.
 */
export function startRequestLog(
  request: object,
  givenId: string | null | undefined,
  logger: Logger,
  startedAt = performance.now(),
): RequestLog {
  const requestId = givenId && REQUEST_ID_PATTERN.test(givenId) ? givenId : randomUUID();
  const entry = new RequestLogEntry(requestId, startedAt, logger);
  loggers.set(request, entry);
  return entry;
}

/** 429 answers get at most one access-log line per this interval, per process. */
const REFUSAL_LOG_INTERVAL_MS = 1_000;
/** When the last 429 line was written, and the 429 answers left unlogged since. */
const refusalLog = { at: Number.NEGATIVE_INFINITY, unlogged: 0 };

/**
 * The access-log line of a completed request (written only at `info` and below). Answers refused by a
 * tenant quota (429) are sampled: one line a second at most, with `refusalsNotLogged`, the 429 answers
 * since the previous such line that got none. A tenant storming past its quota gets thousands of them a
 * second, and a line each cost ~17 % of a refusal's CPU (and the log pipeline's share behind it);
 * `herald_tenant_refusals_total` and `organizationUsage` count every one.
 */
export function logRequestCompleted(entry: RequestLog, method: string, path: string, status: number): void {
  if (UNLOGGED_PATHS.has(path)) return;
  const now = performance.now();
  const durationMs = Math.round((now - entry.startedAt) * 10) / 10;
  if (status !== 429) {
    entry.log.info({ method, path, status, durationMs }, 'request completed');
    return;
  }
  if (now - refusalLog.at < REFUSAL_LOG_INTERVAL_MS) {
    refusalLog.unlogged++;
    return;
  }
  const refusalsNotLogged = refusalLog.unlogged;
  refusalLog.at = now;
  refusalLog.unlogged = 0;
  entry.log.info({ method, path, status, durationMs, refusalsNotLogged }, 'request completed');
}

/**
 * Gives every HTTP request an id (the caller's `x-request-id` when well-formed, else a UUID), a child
 * logger carrying it, an `x-request-id` response header, and one access-log line when it completes.
 */
export function useRequestLogging(logger: Logger): Plugin {
  return {
    onRequest({ request }) {
      startRequestLog(request, request.headers.get(REQUEST_ID_HEADER), logger);
    },
    onResponse({ request, response }) {
      const entry = loggers.get(request);
      if (!entry) return;
      response.headers.set(REQUEST_ID_HEADER, entry.requestId);
      // At `warn` and above the access line is never written: don't parse the URL for it.
      if (!logger.isLevelEnabled('info')) return;
      logRequestCompleted(entry, request.method, new URL(request.url).pathname, response.status);
    },
  };
}
