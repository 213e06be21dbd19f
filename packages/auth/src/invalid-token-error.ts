/** Why a token was refused. `expired` is told apart so a client knows to fetch a fresh token. */
export type InvalidTokenReason = 'expired' | 'invalid';

/**
 * Thrown by {@link TokenVerifier.verify} for any token that must not authenticate a caller: bad
 * signature, wrong algorithm (including `none`), wrong issuer or audience, missing `sub`, expired.
 * The message is safe to show to the caller; it never contains the token.
 */
export class InvalidTokenError extends Error {
  override readonly name = 'InvalidTokenError';
  readonly code = 'UNAUTHENTICATED';

  constructor(
    readonly reason: InvalidTokenReason,
    message: string,
  ) {
    super(message);
  }
}
