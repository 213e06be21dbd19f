import { createPublicKey, createSecretKey, type KeyObject } from 'node:crypto';
import {
  createLocalJWKSet,
  createRemoteJWKSet,
  type JWTPayload,
  type JWTVerifyGetKey,
  errors as joseErrors,
  jwtVerify,
} from 'jose';
import { AuthUnavailableError } from './auth-unavailable-error.js';
import { InvalidTokenError } from './invalid-token-error.js';
import { createVerifiedTokenCache } from './verified-token-cache.js';
import type { Viewer } from './viewer.js';

/** Algorithms accepted for a shared secret. */
export const HMAC_ALGORITHMS = ['HS256'] as const;
/** Algorithms accepted for a PEM public key or a JWKS. `none` and HMAC are never accepted with them. */
export const ASYMMETRIC_ALGORITHMS = ['RS256', 'ES256'] as const;
/** Leeway for `exp`/`nbf` between Herald's clock and the issuer's. */
const CLOCK_TOLERANCE_SEC = 5;
/** Verified tokens remembered (about 1 KiB each with the viewer). */
export const DEFAULT_VERIFIED_TOKEN_CACHE_SIZE = 10_000;
/** A JWKS request that takes longer than this counts as the key source being down. */
const JWKS_TIMEOUT_MS = 3_000;
/** JWKS keys are refetched after this; while the JWKS is down, the last keys fetched keep being used. */
const JWKS_CACHE_MAX_AGE_MS = 10 * 60_000;
/** An unknown `kid` refetches the JWKS at most this often. */
const JWKS_COOLDOWN_MS = 30_000;
/** After a failed JWKS fetch, requests use the last keys (or answer "unavailable") without refetching. */
const JWKS_OUTAGE_BACKOFF_MS = 5_000;
/** `Retry-After` given to callers while the key source is down. */
export const AUTH_RETRY_AFTER_SEC = 5;

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
  /**
   * How many verified tokens to remember until their `exp` (see verified-token-cache.ts); 0 turns the
   * cache off. @default DEFAULT_VERIFIED_TOKEN_CACHE_SIZE
   */
  cacheSize?: number;
  /** JWKS only: how long fetched keys are used before they are refetched. @default 10 minutes */
  jwksCacheMaxAgeMs?: number;
  /** The clock, in ms since the epoch; for tests. @default Date.now */
  now?: () => number;
  /**
   * JWKS only: called with the cause each time fetching the key set fails (at most once per 5 s back-off),
   * for the operator's log. Must not throw. @default ignored
   */
  onKeySourceError?: (error: unknown) => void;
}

export interface TokenVerifier {
  /**
   * Verifies a compact JWT and returns the viewer it names. Tokens without `exp` are refused.
   * @throws InvalidTokenError for every token that must not authenticate
   * @throws AuthUnavailableError when the key source (JWKS) cannot be reached: retry later
   */
  verify(token: string): Promise<Viewer>;
  /** Verified tokens currently remembered. */
  readonly cachedTokens: number;
}

/** Builds the verifier for the configured key source (docs/api.md, "Auth and tenancy"). One per process, shared by HTTP and WebSocket. */
export function createTokenVerifier(options: TokenVerifierOptions): TokenVerifier {
  const now = options.now ?? Date.now;
  const { key, algorithms } = resolveKey(options, now);
  const cache = createVerifiedTokenCache(options.cacheSize ?? DEFAULT_VERIFIED_TOKEN_CACHE_SIZE);
  return {
    async verify(token) {
      const cached = cache.get(token, now());
      if (cached) return cached;
      let payload: JWTPayload;
      try {
        const verifyOptions = {
          algorithms,
          issuer: options.issuer,
          audience: options.audience,
          clockTolerance: CLOCK_TOLERANCE_SEC,
          requiredClaims: ['exp'],
          currentDate: new Date(now()),
        };
        // jose has one overload per key kind; the branch keeps both typed.
        ({ payload } =
          typeof key === 'function'
            ? await jwtVerify(token, key, verifyOptions)
            : await jwtVerify(token, key, verifyOptions));
      } catch (error) {
        if (error instanceof AuthUnavailableError) throw error;
        throw toInvalidTokenError(error);
      }
      const viewer = toViewer(payload);
      cache.set(token, viewer, now());
      return viewer;
    },
    get cachedTokens() {
      return cache.size;
    },
  };
}

function resolveKey(
  options: TokenVerifierOptions,
  now: () => number,
): { key: KeyObject | JWTVerifyGetKey; algorithms: string[] } {
  const source = options.key;
  switch (source.kind) {
    case 'secret':
      // A KeyObject, made once: jose turns it into a WebCrypto key once and caches that, where a raw
      // Uint8Array secret would be imported again on every verification.
      return { key: createSecretKey(Buffer.from(source.secret, 'utf8')), algorithms: [...HMAC_ALGORITHMS] };
    case 'public-key':
      return { key: createPublicKey(source.pem), algorithms: [...ASYMMETRIC_ALGORITHMS] };
    case 'jwks':
      return {
        key: createJwksKey(
          source.url,
          options.jwksCacheMaxAgeMs ?? JWKS_CACHE_MAX_AGE_MS,
          now,
          options.onKeySourceError,
        ),
        algorithms: [...ASYMMETRIC_ALGORITHMS],
      };
  }
}

/**
 * jose's remote JWKS (cached, refetched on an unknown `kid` at most every cooldown), plus outage
 * handling: when a fetch fails, the keys fetched last keep verifying tokens; a token they cannot
 * verify, or any token before keys were ever fetched, gets AuthUnavailableError rather than a refusal.
 */
function createJwksKey(
  url: string,
  cacheMaxAgeMs: number,
  now: () => number,
  onKeySourceError: ((error: unknown) => void) | undefined,
): JWTVerifyGetKey {
  const remote = createRemoteJWKSet(new URL(url), {
    timeoutDuration: JWKS_TIMEOUT_MS,
    cacheMaxAge: cacheMaxAgeMs,
    cooldownDuration: JWKS_COOLDOWN_MS,
  });
  let failedAt = Number.NEGATIVE_INFINITY;
  const fromLastKeys = async (...args: Parameters<JWTVerifyGetKey>) => {
    const jwks = remote.jwks();
    if (jwks) {
      try {
        return await createLocalJWKSet(jwks)(...args);
      } catch {
        // The last keys cannot verify it (e.g. a new kid): only the key source could tell.
      }
    }
    return undefined;
  };
  return async (...args) => {
    if (now() - failedAt < JWKS_OUTAGE_BACKOFF_MS) {
      const key = await fromLastKeys(...args);
      if (key) return key;
      throw new AuthUnavailableError(AUTH_RETRY_AFTER_SEC);
    }
    try {
      return await remote(...args);
    } catch (error) {
      if (!isKeySourceOutage(error)) throw error;
      failedAt = now();
      onKeySourceError?.(error);
      const key = await fromLastKeys(...args);
      if (key) return key;
      throw new AuthUnavailableError(AUTH_RETRY_AFTER_SEC, { cause: error });
    }
  };
}

/**
 * A JWKS failure that is the key source's fault, not the token's: no connection or a timeout, a status
 * other than 200, a body that is not a key set. jose reports token problems (no matching key, bad
 * signature) with specific JOSEError subclasses, which stay refusals.
 */
function isKeySourceOutage(error: unknown): boolean {
  if (!(error instanceof joseErrors.JOSEError)) return true; // fetch failed: refused, reset, DNS
  return (
    error instanceof joseErrors.JWKSTimeout ||
    error instanceof joseErrors.JWKSInvalid ||
    error.code === joseErrors.JOSEError.code
  );
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
  const { sub, name, orgs, exp, roles } = payload;
  if (typeof sub !== 'string' || sub.length === 0) {
    throw new InvalidTokenError('invalid', 'invalid token: sub claim missing');
  }
  if (orgs !== undefined && !(Array.isArray(orgs) && orgs.every((org) => typeof org === 'string'))) {
    throw new InvalidTokenError('invalid', 'invalid token: orgs claim must be an array of strings');
  }
  if (roles !== undefined && !(Array.isArray(roles) && roles.every((role) => typeof role === 'string'))) {
    throw new InvalidTokenError('invalid', 'invalid token: roles claim must be an array of strings');
  }
  // Frozen: a cached viewer is shared by every request carrying the same token.
  return Object.freeze({
    id: sub,
    name: typeof name === 'string' && name.length > 0 ? name : sub,
    orgs: Object.freeze([...((orgs as string[] | undefined) ?? [])]),
    expiresAt: exp,
    roles: Object.freeze([...((roles as string[] | undefined) ?? [])]),
  });
}
