import { LRUCache } from 'lru-cache';
import type { Viewer } from './viewer.js';

/**
 * Tokens that passed full verification, keyed by the exact token string, so a repeat caller (every
 * HTTP request, every socket of the same client) skips the signature check and claim parsing.
 *
 * Safety rests on three rules: only successes are stored (a refusal is never remembered, so a key
 * source that comes back is used at once); the key is the whole compact token, signature included, so a
 * forged or altered token is a different key and is verified in full; and a hit is only served while
 * `now < exp` on the injected clock (the LRU's own TTL frees memory at `exp` but is not trusted for
 * correctness). The size is bounded; least recently used tokens go first.
 */
export interface VerifiedTokenCache {
  /** The viewer of a token verified before, if it has not expired at `nowMs`. */
  get(token: string, nowMs: number): Viewer | undefined;
  /** Remembers a verified token until its `exp`; tokens without `exp` are never stored. */
  set(token: string, viewer: Viewer, nowMs: number): void;
  readonly size: number;
}

export function createVerifiedTokenCache(maxEntries: number): VerifiedTokenCache {
  if (maxEntries <= 0) return { get: () => undefined, set: () => {}, size: 0 };
  const cache = new LRUCache<string, Viewer>({ max: maxEntries, ttlAutopurge: false });
  return {
    get(token, nowMs) {
      const viewer = cache.get(token);
      if (viewer === undefined) return undefined;
      if (viewer.expiresAt === undefined || nowMs >= viewer.expiresAt * 1000) {
        cache.delete(token);
        return undefined;
      }
      return viewer;
    },
    set(token, viewer, nowMs) {
      if (viewer.expiresAt === undefined) return;
      const ttlMs = viewer.expiresAt * 1000 - nowMs;
      if (ttlMs > 0) cache.set(token, viewer, { ttl: ttlMs });
    },
    get size() {
      return cache.size;
    },
  };
}
