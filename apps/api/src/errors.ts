import { ErrorCode } from '@herald/contracts';
import { GraphQLError, type GraphQLErrorOptions } from 'graphql';

/**
 * Expected failures. Each is a GraphQLError with `extensions.code`, so Yoga passes its message to the
 * client unmasked; anything else thrown by a resolver is masked as INTERNAL_SERVER_ERROR and logged.
 */
abstract class HeraldError extends GraphQLError {
  constructor(
    message: string,
    code: ErrorCode,
    extensions: Record<string, unknown> = {},
    options: Omit<GraphQLErrorOptions, 'extensions'> = {},
  ) {
    super(message, { ...options, extensions: { ...extensions, code } });
  }
}

/** No current user, where one is required. */
export class UnauthenticatedError extends HeraldError {
  override readonly name = 'UnauthenticatedError';
  constructor(message = 'Not authenticated: sign in and send a bearer token') {
    super(message, ErrorCode.UNAUTHENTICATED);
  }
}

/** The current user is not a member of the organisation the operation names. */
export class ForbiddenError extends HeraldError {
  override readonly name = 'ForbiddenError';
  constructor(message = 'Forbidden: you are not a member of this organisation') {
    super(message, ErrorCode.FORBIDDEN);
  }
}

/**
 * No such object, or one the viewer may not see: the two answer identically so that another
 * tenant's ids reveal nothing.
 */
export class NotFoundError extends HeraldError {
  override readonly name = 'NotFoundError';
  constructor(what: string) {
    super(`${what} not found`, ErrorCode.NOT_FOUND);
  }
}

/** The arguments are well-typed but not acceptable (an empty title, a malformed cursor, …). */
export class BadUserInputError extends HeraldError {
  override readonly name = 'BadUserInputError';
  constructor(message: string, field?: string) {
    super(message, ErrorCode.BAD_USER_INPUT, field ? { field } : {});
  }
}

/** An invalid, expired or wrongly signed token on an HTTP request: answered with HTTP 401. */
export class InvalidCredentialsError extends HeraldError {
  override readonly name = 'InvalidCredentialsError';
  constructor(message: string) {
    super(message, ErrorCode.UNAUTHENTICATED, {
      http: { status: 401, headers: { 'WWW-Authenticate': 'Bearer error="invalid_token"' } },
    });
  }
}

/** What `Retry-After` tells a client to wait after a {@link ServiceUnavailableError}, in seconds. */
export const SERVICE_UNAVAILABLE_RETRY_AFTER_S = 2;

/**
 * The database went away under this operation (failover, restart, dropped connection, pool full for
 * too long): HTTP 503 with `Retry-After`, code SERVICE_UNAVAILABLE. Built by the error masking from
 * errors that `isDatabaseUnavailableError` recognises; their details stay in the log.
 */
export class ServiceUnavailableError extends HeraldError {
  override readonly name = 'ServiceUnavailableError';
  /** @param at the error being replaced: its location and path are kept, its message is not. */
  constructor(at?: GraphQLError) {
    super(
      'Service temporarily unavailable: the database is unreachable; retry shortly',
      ErrorCode.SERVICE_UNAVAILABLE,
      { http: { status: 503, headers: { 'Retry-After': String(SERVICE_UNAVAILABLE_RETRY_AFTER_S) } } },
      at ? { nodes: at.nodes, source: at.source, positions: at.positions, path: at.path } : {},
    );
  }
}

/**
 * A subscription's `after` cursor can't be honoured: malformed, older than the history (trimmed or
 * expired), from another organisation, or from an earlier history that was lost (another epoch). The
 * client reconciles with a `posts` query and subscribes again without `after` (docs/subscriptions.md).
 */
export class CursorExpiredError extends HeraldError {
  override readonly name = 'CursorExpiredError';
  constructor(reason: string) {
    super(
      `Cursor expired: ${reason}; reconcile with a posts query and subscribe again without after`,
      ErrorCode.CURSOR_EXPIRED,
    );
  }
}

/**
 * The token could not be checked because the key source (JWKS) does not answer: HTTP 503 with
 * `Retry-After`, code AUTH_UNAVAILABLE, so clients back off instead of discarding a good token.
 */
export class AuthServiceUnavailableError extends HeraldError {
  override readonly name = 'AuthServiceUnavailableError';
  constructor(retryAfterSec: number) {
    super('Authentication is temporarily unavailable: retry later with the same token', ErrorCode.AUTH_UNAVAILABLE, {
      http: { status: 503, headers: { 'Retry-After': String(retryAfterSec) } },
    });
  }
}

/** A live subscription ended because its event source failed; the client subscribes again. */
export class SubscriptionInterruptedError extends HeraldError {
  override readonly name = 'SubscriptionInterruptedError';
  constructor(message = 'Subscription interrupted on the server: subscribe again (with your last cursor)') {
    super(message, ErrorCode.SUBSCRIPTION_INTERRUPTED);
  }
}

/**
 * The history a resuming subscription replays could not be read (Redis unreachable, or a read timed
 * out): an `error` message with code HISTORY_UNAVAILABLE, before or during the replay. The cursor is
 * still valid; the client subscribes again with it after a backoff (docs/subscriptions.md).
 */
export class HistoryUnavailableError extends HeraldError {
  override readonly name = 'HistoryUnavailableError';
  constructor() {
    super(
      'Subscription history temporarily unavailable: subscribe again with the same cursor after a backoff',
      ErrorCode.HISTORY_UNAVAILABLE,
    );
  }
}

/**
 * An organisation (or user) is over a rate quota (tenancy/quotas.ts): HTTP 429 with `Retry-After` (whole
 * seconds, at least 1), code RATE_LIMITED, `extensions.retryAfterMs` and `extensions.limit` (the quota).
 */
export class RateLimitedError extends HeraldError {
  override readonly name = 'RateLimitedError';
  constructor(limit: string, retryAfterMs: number) {
    const ms = Math.max(1, Math.ceil(retryAfterMs));
    super(`Rate limited: over the ${limit} quota; retry in ${ms} ms`, ErrorCode.RATE_LIMITED, {
      limit,
      retryAfterMs: ms,
      http: { status: 429, headers: { 'Retry-After': String(Math.max(1, Math.ceil(ms / 1000))) } },
    });
  }

  /**
   * A refusal without a stack trace: capturing one costs more than the rest of the refusal together
   * (~25 µs of ~29, bench/micro/quota-micro.ts), and a refusal's stack says nothing (it is expected, never
   * logged as a failure). A storm's refusals must stay cheap.
   */
  static cheap(limit: string, retryAfterMs: number): RateLimitedError {
    const stackTraceLimit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      return new RateLimitedError(limit, retryAfterMs);
    } finally {
      Error.stackTraceLimit = stackTraceLimit;
    }
  }
}

/** A subscribe over the organisation's cap on active subscriptions; the socket stays open. */
export class SubscriptionLimitExceededError extends HeraldError {
  override readonly name = 'SubscriptionLimitExceededError';
  constructor(limit: string, message: string) {
    super(message, ErrorCode.SUBSCRIPTION_LIMIT_EXCEEDED, { limit });
  }
}
