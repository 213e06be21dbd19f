import { createSecretKey, type KeyObject } from 'node:crypto';
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

interface Cached {
  keys: HmacKeys;
  usedAt: number;
}

/** In order of last use, least recent first (a hit moves its entry to the end). */
const cache = new Map<string, Cached>();

/**
 * The HMAC keys of a symmetric secret, derived once and kept while in use: a sender signs every
 * delivery of an endpoint with the same few secrets, and decoding the standard key and importing both
 * keys for each signature costs more than the HMACs of a small body. At most {@link MAX_CACHED_SECRETS}
 * secrets are kept, least recently used dropped first, and one unused for {@link CACHED_SECRET_IDLE_MS} is
 * dropped by a later call (for any secret: an idle process keeps what it has).
 * @param now the clock, for tests
 * @throws TypeError as {@link standardWebhookKey} (an empty secret, a `whsk_` signing key)
 */
export function hmacKeysOf(secret: string, now = performance.now()): HmacKeys {
  // One look at the least recently used entry per call: idle ones drain while signing goes on.
  const oldestSecret = cache.keys().next().value;
  if (oldestSecret !== undefined && oldestSecret !== secret) {
    const oldest = cache.get(oldestSecret);
    if (oldest && now - oldest.usedAt > CACHED_SECRET_IDLE_MS) cache.delete(oldestSecret);
  }
  let cached = cache.get(secret);
  if (cached) {
    cache.delete(secret);
    cached.usedAt = now;
  } else {
    cached = {
      keys: {
        standard: createSecretKey(standardWebhookKey(secret)),
        stripe: createSecretKey(Buffer.from(secret, 'utf8')),
      },
      usedAt: now,
    };
    if (cache.size >= MAX_CACHED_SECRETS) cache.delete(cache.keys().next().value as string);
  }
  cache.set(secret, cached);
  return cached.keys;
}

/** Secrets whose keys are kept right now (tests, diagnostics). */
export function cachedHmacSecrets(): number {
  return cache.size;
}

/** Forgets every kept key (tests). */
export function clearHmacKeyCache(): void {
  cache.clear();
}
