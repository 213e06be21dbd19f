/**
 * The error codes Herald puts in a GraphQL error's `extensions.code`.
 * Clients switch on these; they are part of the contract and never renamed.
 */
export const ErrorCode = {
  UNAUTHENTICATED: 'UNAUTHENTICATED',
  FORBIDDEN: 'FORBIDDEN',
  BAD_USER_INPUT: 'BAD_USER_INPUT',
  NOT_FOUND: 'NOT_FOUND',
  INTERNAL_SERVER_ERROR: 'INTERNAL_SERVER_ERROR',
  /**
   * PostgreSQL or Redis is unreachable for now (failover, restart, dropped connection): HTTP 503 with
   * `Retry-After`. Not the caller's fault; retry the same operation shortly.
   */
  SERVICE_UNAVAILABLE: 'SERVICE_UNAVAILABLE',
  /** The document does not parse, or a limit on its size (tokens, parser nesting) refused it. */
  GRAPHQL_PARSE_FAILED: 'GRAPHQL_PARSE_FAILED',
  /** The document does not validate, or a limit (depth, aliases, cost, directives) refused it. */
  GRAPHQL_VALIDATION_FAILED: 'GRAPHQL_VALIDATION_FAILED',
  /** A subscription sent over HTTP (SSE, multipart, plain POST): subscriptions are served over WebSocket only. */
  WEBSOCKET_REQUIRED: 'WEBSOCKET_REQUIRED',
  /** The token could not be checked because the key source (JWKS) is unreachable: retry later, same token. */
  AUTH_UNAVAILABLE: 'AUTH_UNAVAILABLE',
  /** A subscription's `after` cursor is malformed, older than the history, or foreign (docs/subscriptions.md). */
  CURSOR_EXPIRED: 'CURSOR_EXPIRED',
  /** A live subscription ended on the server's side (its event source failed): subscribe again. */
  SUBSCRIPTION_INTERRUPTED: 'SUBSCRIPTION_INTERRUPTED',
  /**
   * A resuming subscription's history could not be read right now (Redis unreachable or too slow): the
   * cursor is still good. Subscribe again with the same cursor after a backoff; never reconcile for it.
   */
  HISTORY_UNAVAILABLE: 'HISTORY_UNAVAILABLE',
  /**
   * An organisation (or user) is over one of its quotas: HTTP 429 with `Retry-After`;
   * `extensions.retryAfterMs` says when to try again and `extensions.limit` names the quota
   * (`operationsPerSecond`, `publishesPerSecond`, `subscriptions`). Retry the same operation after it.
   */
  RATE_LIMITED: 'RATE_LIMITED',
  /**
   * A subscribe over a cap on active subscriptions (per socket, or the organisation's `subscriptions`
   * quota, named in `extensions.limit`): the socket stays open; end another subscription first.
   */
  SUBSCRIPTION_LIMIT_EXCEEDED: 'SUBSCRIPTION_LIMIT_EXCEEDED',
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];
