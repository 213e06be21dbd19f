/**
 * The error codes Herald puts in a GraphQL error's `extensions.code` (SPEC §5).
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
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];
