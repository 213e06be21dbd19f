import { createSecretKey, type KeyObject } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { standardWebhookKey } from './webhook-secret.js';

/** Secrets whose keys are kept at most; past this, the least recently used is dropped. */
export const MAX_CACHED_SECRETS = 10_000;
/**
 * A secret's keys unused this long are dropped (checked as keys are asked for): a rotated-out or
 * revoked secret does not stay in memory for the life of the process.
 */
export const CACHED_SECRET_IDLE_MS = 10 * 60_000;

/** The two HMAC keys of one symmetric signing secret, as key objects. */
export interface HmacKeys {
  /** `X-Webhook-Signature` (Stripe's scheme): the whole secret string, prefix included. */
  stripe: KeyObject;
  /** `webhook-signature` (Standard Webhooks): {@link standardWebhookKey} of the secret. */
  standard: KeyObject;
}

/** The clock of the call being served: `hmacKeysOf`'s `now`, read by the cache for its idle limit. */
let clock = 0;

/**
 * A hit refreshes both its recency and its idle time. `allowStale`, so that `rkeys()` yields the least
 * recently used entry even when it is idle (lookups ask for fresh entries only, {@link FRESH_ONLY}).
 * `ttlResolution: 0`: lru-cache would otherwise arm a timer on every lookup to cache the clock.
 */
const cache = new LRUCache<string, HmacKeys>({
  max: MAX_CACHED_SECRETS,
  ttl: CACHED_SECRET_IDLE_MS,
  updateAgeOnGet: true,
  allowStale: true,
  ttlResolution: 0,
  perf: { now: () => clock },
});
/** A secret idle past the limit is derived again when asked for (and its old entry dropped). */
const FRESH_ONLY = { allowStale: false } as const;

/**
 * The HMAC keys of a symmetric secret, derived once and kept while in use: a sender signs every
 * delivery of an endpoint with the same few secrets, and decoding the standard key and importing both
 * keys for each signature costs more than the HMACs of a small body. At most {@link MAX_CACHED_SECRETS}
 * secrets are kept, least recently used dropped first, and one unused for {@link CACHED_SECRET_IDLE_MS} is
 * dropped by a later call (for any secret: an idle process keeps what it has).
 * A lookup costs 175 ns of CPU on lru-cache against 105 ns hand-made on a Map (`node --import tsx
 * bench/micro/cache-micro.ts`), next to microseconds for the HMACs it serves.
 * @param now the clock, for tests
 * @throws TypeError as {@link standardWebhookKey} (an empty secret, a `whsk_` signing key)
 */
export function hmacKeysOf(secret: string, now = performance.now()): HmacKeys {
  clock = now;
  // One look at the least recently used entry per call: idle ones drain while signing goes on.
  for (const oldest of cache.rkeys()) {
    if (oldest !== secret && cache.getRemainingTTL(oldest) < 0) cache.delete(oldest);
    break;
  }
  let keys = cache.get(secret, FRESH_ONLY);
  if (!keys) {
    keys = {
      standard: createSecretKey(standardWebhookKey(secret)),
      stripe: createSecretKey(Buffer.from(secret, 'utf8')),
    };
    cache.set(secret, keys);
  }
  return keys;
}

/** Secrets whose keys are kept right now (tests, diagnostics). */
export function cachedHmacSecrets(): number {
  return cache.size;
}

/** Forgets every kept key (tests). */
export function clearHmacKeyCache(): void {
  cache.clear();
}
