import { randomUUID } from 'node:crypto';
import type { Plugin } from 'graphql-yoga';
import type { Logger } from '../logger.js';

/** Header a proxy may set to correlate its logs with ours; echoed on every response. */
export const REQUEST_ID_HEADER = 'x-request-id';
/** A client-supplied id longer than this, or with odd characters, is replaced by a fresh one. */
const REQUEST_ID_PATTERN = /^[\w.:-]{1,128}$/;

const loggers = new WeakMap<Request, { log: Logger; requestId: string; startedAt: number }>();

/** The logger bound to this request's id (the root logger for requests this plugin did not see). */
export function requestLogger(request: Request | undefined, fallback: Logger): Logger {
  return (request && loggers.get(request)?.log) ?? fallback;
}

/**
 * Gives every HTTP request an id (the caller's `x-request-id` when well-formed, else a UUID), a child
 * logger carrying it, an `x-request-id` response header, and one access-log line when it completes.
 */
export function useRequestLogging(logger: Logger): Plugin {
  return {
    onRequest({ request }) {
      const given = request.headers.get(REQUEST_ID_HEADER);
      const requestId = given && REQUEST_ID_PATTERN.test(given) ? given : randomUUID();
      loggers.set(request, { log: logger.child({ requestId }), requestId, startedAt: performance.now() });
    },
    onResponse({ request, response }) {
      const entry = loggers.get(request);
      if (!entry) return;
      response.headers.set(REQUEST_ID_HEADER, entry.requestId);
      // At `warn` and above the access line is never written: don't parse the URL for it.
      if (!logger.isLevelEnabled('info')) return;
      const url = new URL(request.url);
      if (url.pathname === '/health' || url.pathname === '/readiness') return;
      entry.log.info(
        {
          method: request.method,
          path: url.pathname,
          status: response.status,
          durationMs: Math.round((performance.now() - entry.startedAt) * 10) / 10,
        },
        'request completed',
      );
    },
  };
}
