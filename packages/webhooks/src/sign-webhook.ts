import {
  STANDARD_WEBHOOK_ID_HEADER,
  STANDARD_WEBHOOK_SIGNATURE_HEADER,
  STANDARD_WEBHOOK_TIMESTAMP_HEADER,
  WEBHOOK_ID_HEADER,
  WEBHOOK_SIGNATURE_HEADER,
  WEBHOOK_TIMESTAMP_HEADER,
} from './headers.js';
import { hmacKeysOf } from './hmac-keys.js';
import { SIGNATURE_SCHEME, signatureHmac } from './signature.js';
import { computeAsymmetricSignature, isWebhookSigningKey } from './signing-key-pair.js';
import {
  ASYMMETRIC_SIGNATURE_VERSION,
  STANDARD_SIGNATURE_VERSION,
  standardSignatureHmac,
} from './standard-signature.js';

export interface SignWebhookOptions {
  /** The event id (`evt_…`), sent as `X-Webhook-ID`; must equal the body's `id`. */
  eventId: string;
  /** The exact bytes that will be sent as the body; sign after serialising, never re-serialise after. */
  rawBody: string;
  /**
   * The endpoint's active signing secrets: one during normal operation, the new and the old one
   * during a rotation's grace period. One `v1` entry per secret is produced in each signature
   * header, in this order. A `whsec_` + base64 secret keys the Standard Webhooks signature with its
   * decoded bytes (see `standardWebhookKey`). An ed25519 signing key (`whsk_…`, an endpoint that asked
   * for asymmetric signatures) adds a `v1a` entry to `webhook-signature` only: Stripe's scheme has no
   * asymmetric form, so `X-Webhook-Signature` is sent only when some secret is symmetric.
   * An empty list throws a `TypeError`: an unsigned delivery is never sent.
   */
  secrets: readonly string[];
  /** Unix seconds to sign with (`t`). @default now */
  timestamp?: number;
}

/**
 * The headers of one delivery attempt, in two schemes signed with the same secrets:
 * - Stripe's: `X-Webhook-ID`, `X-Webhook-Timestamp` and `X-Webhook-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`,
 *   where each hex is HMAC-SHA256(secret string, `${t}.${rawBody}`);
 * - Standard Webhooks': `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64>[ v1,<base64>…]`,
 *   where each base64 is HMAC-SHA256(decoded secret, `${id}.${t}.${rawBody}`);
 * plus `Content-Type: application/json`. Both timestamps are the same `t`. Sign every attempt afresh
 * so that `t` is current: a retry signed with the first attempt's time would fall out of the
 * receiver's replay window. Every sender (the engine, examples, the bench) signs through this one function.
 *
 * @throws TypeError when `secrets` is empty, `eventId` is empty or contains a line break, or
 *   `timestamp` is not a non-negative integer.
 */
export function signWebhook(options: SignWebhookOptions): Record<string, string> {
  const { eventId, rawBody, secrets } = options;
  const timestampSec = options.timestamp ?? Math.floor(Date.now() / 1000);
  if (secrets.length === 0) throw new TypeError('signWebhook: at least one secret is required');
  if (eventId.length === 0 || /[\r\n]/.test(eventId)) {
    throw new TypeError('signWebhook: eventId must be non-empty and on one line');
  }
  if (!Number.isSafeInteger(timestampSec) || timestampSec < 0) {
    throw new TypeError('signWebhook: timestamp must be a non-negative integer (Unix seconds)');
  }
  // One pass over the secrets (usually one): each symmetric secret's keys are derived once
  // (hmacKeysOf), and each HMAC is digested straight to the header's text.
  const timestamp = String(timestampSec);
  let signature = `t=${timestamp}`;
  let standardSignature = '';
  let asymmetricSignature = '';
  let symmetric = false;
  for (const secret of secrets) {
    if (secret.length === 0) throw new TypeError('signWebhook: a secret is empty');
    if (isWebhookSigningKey(secret)) {
      const signed = computeAsymmetricSignature(secret, eventId, timestampSec, rawBody).toString('base64');
      asymmetricSignature += ` ${ASYMMETRIC_SIGNATURE_VERSION},${signed}`;
      continue;
    }
    symmetric = true;
    const keys = hmacKeysOf(secret);
    signature += `,${SIGNATURE_SCHEME}=${signatureHmac(keys.stripe, timestampSec, rawBody).digest('hex')}`;
    const standard = standardSignatureHmac(keys.standard, eventId, timestampSec, rawBody).digest('base64');
    standardSignature += ` ${STANDARD_SIGNATURE_VERSION},${standard}`;
  }
  const headers: Record<string, string> = {
    'Content-Type': 'application/json',
    [WEBHOOK_ID_HEADER]: eventId,
    [WEBHOOK_TIMESTAMP_HEADER]: timestamp,
  };
  if (symmetric) headers[WEBHOOK_SIGNATURE_HEADER] = signature;
  headers[STANDARD_WEBHOOK_ID_HEADER] = eventId;
  headers[STANDARD_WEBHOOK_TIMESTAMP_HEADER] = timestamp;
  // `v1` entries first, then `v1a` (formatStandardSignatureHeader's order).
  headers[STANDARD_WEBHOOK_SIGNATURE_HEADER] = (standardSignature + asymmetricSignature).slice(1);
  return headers;
}
