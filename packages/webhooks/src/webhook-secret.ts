import { randomBytes } from 'node:crypto';

/** Every signing secret starts with this, so a leaked one is recognisable (secret scanners, logs). */
export const WEBHOOK_SECRET_PREFIX = 'whsec_';
/** Random bytes behind a generated secret; issue 4 requires at least 24. */
export const WEBHOOK_SECRET_BYTES = 32;

/**
 * A new endpoint signing secret: `whsec_` followed by the base64url encoding of
 * {@link WEBHOOK_SECRET_BYTES} random bytes (43 characters).
 *
 * The whole string, prefix included, is the HMAC key, as with Stripe's `whsec_…` secrets, so a
 * receiver pastes it into any Stripe-compatible verifier unchanged.
 */
export function generateWebhookSecret(): string {
  return WEBHOOK_SECRET_PREFIX + randomBytes(WEBHOOK_SECRET_BYTES).toString('base64url');
}
