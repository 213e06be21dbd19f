import { createPublicKey, type KeyObject } from 'node:crypto';
import { createRemoteJWKSet, type JWTPayload, type JWTVerifyGetKey, errors as joseErrors, jwtVerify } from 'jose';
import { InvalidTokenError } from './invalid-token-error.js';
import type { Viewer } from './viewer.js';

/** Algorithms accepted for a shared secret. */
export const HMAC_ALGORITHMS = ['HS256'] as const;
/** Algorithms accepted for a PEM public key or a JWKS. `none` and HMAC are never accepted with them. */
export const ASYMMETRIC_ALGORITHMS = ['RS256', 'ES256'] as const;
/** Leeway for `exp`/`nbf` between Herald's clock and the issuer's. */
const CLOCK_TOLERANCE_SEC = 5;

/**
 * Where the key that signs tokens comes from. Exactly one source is used; the env parser makes sure
 * of that.
 */
export type TokenKeySource =
  /** HS256 shared secret (at least 32 bytes recommended). */
  | { kind: 'secret'; secret: string }
  /** PEM-encoded SPKI public key for RS256 or ES256. */
  | { kind: 'public-key'; pem: string }
  /** JWKS endpoint; keys are fetched lazily, cached, and refetched when an unknown `kid` appears. */
  | { kind: 'jwks'; url: string };

export interface TokenVerifierOptions {
  key: TokenKeySource;
  /** When set, the `iss` claim must equal it. @default unchecked */
  issuer?: string | undefined;
  /** When set, the `aud` claim must contain it. @default unchecked */
  audience?: string | undefined;
}

export interface TokenVerifier {
  /**
   * Verifies a compact JWT and returns the viewer it names.
   * @throws InvalidTokenError for every token that must not authenticate (never any other error type).
   */
  verify(token: string): Promise<Viewer>;
}

/** Builds the verifier for the configured key source (SPEC §4). */
export function createTokenVerifier(options: TokenVerifierOptions): TokenVerifier {
  const { key, algorithms } = resolveKey(options.key);
  return {
    async verify(token) {
      let payload: JWTPayload;
      try {
        const verifyOptions = {
          algorithms,
          issuer: options.issuer,
          audience: options.audience,
          clockTolerance: CLOCK_TOLERANCE_SEC,
        };
        // jose has one overload per key kind; the branch keeps both typed.
        ({ payload } =
          typeof key === 'function'
            ? await jwtVerify(token, key, verifyOptions)
            : await jwtVerify(token, key, verifyOptions));
      } catch (error) {
        throw toInvalidTokenError(error);
      }
      return toViewer(payload);
    },
  };
}

function resolveKey(source: TokenKeySource): {
  key: Uint8Array | KeyObject | JWTVerifyGetKey;
  algorithms: string[];
} {
  switch (source.kind) {
    case 'secret':
      return { key: new TextEncoder().encode(source.secret), algorithms: [...HMAC_ALGORITHMS] };
    case 'public-key':
      return { key: createPublicKey(source.pem), algorithms: [...ASYMMETRIC_ALGORITHMS] };
    case 'jwks':
      return { key: createRemoteJWKSet(new URL(source.url)), algorithms: [...ASYMMETRIC_ALGORITHMS] };
  }
}

function toInvalidTokenError(error: unknown): InvalidTokenError {
  if (error instanceof joseErrors.JWTExpired) {
    return new InvalidTokenError('expired', 'token expired');
  }
  if (error instanceof joseErrors.JWTClaimValidationFailed) {
    return new InvalidTokenError('invalid', `invalid token: ${error.claim} claim check failed`);
  }
  if (error instanceof joseErrors.JOSEAlgNotAllowed) {
    return new InvalidTokenError('invalid', 'invalid token: signing algorithm not allowed');
  }
  return new InvalidTokenError('invalid', 'invalid token');
}

function toViewer(payload: JWTPayload): Viewer {
  const { sub, name, orgs, exp } = payload;
  if (typeof sub !== 'string' || sub.length === 0) {
    throw new InvalidTokenError('invalid', 'invalid token: sub claim missing');
  }
  if (orgs !== undefined && !(Array.isArray(orgs) && orgs.every((org) => typeof org === 'string'))) {
    throw new InvalidTokenError('invalid', 'invalid token: orgs claim must be an array of strings');
  }
  return {
    id: sub,
    name: typeof name === 'string' && name.length > 0 ? name : sub,
    orgs: orgs ?? [],
    expiresAt: exp,
  };
}
