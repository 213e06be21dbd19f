import { createSecretKey, type KeyObject } from 'node:crypto';
import { standardWebhookKey } from './webhook-secret.js';

/** Secrets whose keys are kept; past this, the oldest is dropped first. */
const MAX_CACHED_SECRETS = 10_000;

/** The two HMAC keys of one symmetric signing secret, as key objects. */
export interface HmacKeys {
  /** `X-Webhook-Signature` (Stripe's scheme): the whole secret string, prefix included. */
  stripe: KeyObject;
  /** `webhook-signature` (Standard Webhooks): {@link standardWebhookKey} of the secret. */
  standard: KeyObject;
}

const cache = new Map<string, HmacKeys>();

/**
 * The HMAC keys of a symmetric secret, derived once and kept (at most {@link MAX_CACHED_SECRETS}
 * secrets, oldest dropped first): a sender signs every delivery of an endpoint with the same few
 * secrets, and decoding the standard key and importing both keys for each signature costs more than
 * the HMACs of a small body.
 * @throws TypeError as {@link standardWebhookKey} (an empty secret, a `whsk_` signing key)
 */
export function hmacKeysOf(secret: string): HmacKeys {
  let keys = cache.get(secret);
  if (!keys) {
    keys = {
      standard: createSecretKey(standardWebhookKey(secret)),
      stripe: createSecretKey(Buffer.from(secret, 'utf8')),
    };
    if (cache.size >= MAX_CACHED_SECRETS) cache.delete(cache.keys().next().value as string);
    cache.set(secret, keys);
  }
  return keys;
}
