/**
 * Thrown by {@link TokenVerifier.verify} when the token cannot be checked because the key source is
 * unreachable (a `JWT_JWKS_URL` that times out, refuses connections or answers other than 200 with a key
 * set). Not the caller's fault: answer HTTP 503 `AUTH_UNAVAILABLE` with `Retry-After`, or close a socket
 * with 1013, never 401/4403.
 */
export class AuthUnavailableError extends Error {
  override readonly name = 'AuthUnavailableError';
  readonly code = 'AUTH_UNAVAILABLE';

  constructor(
    /** Seconds after which a retry may succeed; for `Retry-After`. */
    readonly retryAfterSec: number,
    options?: { cause?: unknown },
  ) {
    super('token verification unavailable: the key source does not answer', options);
  }
}
