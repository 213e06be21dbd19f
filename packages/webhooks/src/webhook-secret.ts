import { randomBytes } from 'node:crypto';

/** Every signing secret starts with this, so a leaked one is recognisable (secret scanners, logs). */
export const WEBHOOK_SECRET_PREFIX = 'whsec_';
/** Random bytes behind a generated secret; never fewer than 24. */
export const WEBHOOK_SECRET_BYTES = 32;
/** Standard base64 (padded) or base64url (unpadded): the two encodings a Herald secret has used. */
const BASE64_BODY_PATTERN = /^(?:[A-Za-z0-9+/]{4,}={0,2}|[A-Za-z0-9_-]{4,})$/;

/**
 * A new endpoint signing secret: `whsec_` followed by the standard (padded) base64 encoding of
 * {@link WEBHOOK_SECRET_BYTES} random bytes (44 characters), as the Standard Webhooks specification
 * encodes secrets.
 *
 * One string serves both schemes: the `X-Webhook-Signature` (Stripe) scheme keys its HMAC with the
 * whole string, prefix included, as Stripe's `whsec_…` secrets do; the `webhook-signature`
 * (Standard Webhooks) scheme keys it with the decoded bytes, as `standardwebhooks` and `svix` do.
 */
export function generateWebhookSecret(): string {
  return WEBHOOK_SECRET_PREFIX + randomBytes(WEBHOOK_SECRET_BYTES).toString('base64');
}

/**
 * The HMAC key of the Standard Webhooks scheme for a signing secret: the base64-decoded part after
 * `whsec_`. Secrets issued before Standard Webhooks support are base64url and decode to the same
 * random bytes. Any other string (a secret set by hand, not `whsec_` + base64) is keyed by its
 * UTF-8 bytes, so every secret has exactly one Standard Webhooks form. An ed25519 signing key
 * (`whsk_…`) has none: it throws a `TypeError`. The migration
 * `2026-11-23T11-20_webhooks-ops-standard-secrets` computes the same in SQL (pinned by its test).
 */
export function standardWebhookKey(secret: string): Buffer {
  if (secret.length === 0) throw new TypeError('standardWebhookKey: the secret is empty');
  if (secret.startsWith('whsk_')) {
    throw new TypeError('standardWebhookKey: a whsk_ ed25519 signing key is not an HMAC secret');
  }
  if (secret.startsWith(WEBHOOK_SECRET_PREFIX)) {
    const body = secret.slice(WEBHOOK_SECRET_PREFIX.length);
    // A base64 text of 4n+1 characters (padding aside) encodes no whole byte: not a base64 secret.
    if (BASE64_BODY_PATTERN.test(body) && body.replace(/=+$/, '').length % 4 !== 1) {
      const key = Buffer.from(body, 'base64');
      if (key.length > 0) return key;
    }
  }
  return Buffer.from(secret, 'utf8');
}

/**
 * The secret as the Standard Webhooks libraries take it: `whsec_` + standard base64 of
 * {@link standardWebhookKey}. For a secret generated today it is the secret itself; for an older
 * base64url secret it is the same key re-encoded (`-`→`+`, `_`→`/`, padded), which is what to paste
 * into `new Webhook(…)` of `standardwebhooks` or `svix`. The original string keeps verifying
 * `X-Webhook-Signature` (Stripe's `constructEvent`) and both schemes in `verifyWebhook`.
 */
export function toStandardWebhookSecret(secret: string): string {
  return WEBHOOK_SECRET_PREFIX + standardWebhookKey(secret).toString('base64');
}
