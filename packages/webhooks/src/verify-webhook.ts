import { timingSafeEqual } from 'node:crypto';
import {
  STANDARD_WEBHOOK_ID_HEADER,
  STANDARD_WEBHOOK_SIGNATURE_HEADER,
  STANDARD_WEBHOOK_TIMESTAMP_HEADER,
  WEBHOOK_ID_HEADER,
  WEBHOOK_SIGNATURE_HEADER,
  WEBHOOK_TIMESTAMP_HEADER,
} from './headers.js';
import { readHeader, type WebhookHeaders } from './read-header.js';
import { computeSignature, parseSignatureHeader } from './signature.js';
import { verifyAsymmetricSignature, WEBHOOK_PUBLIC_KEY_PREFIX } from './signing-key-pair.js';
import { computeStandardSignature, parseStandardSignatureHeader } from './standard-signature.js';
import { isWebhookEvent, type WebhookEvent } from './webhook-event.js';
import { standardWebhookKey } from './webhook-secret.js';
import { WebhookVerificationError } from './webhook-verification-error.js';

/** Replay window: how far the signed `t` may be from the receiver's clock, either way. */
export const DEFAULT_TOLERANCE_SEC = 300;

export interface VerifyWebhookOptions {
  /**
   * The body exactly as received, before any JSON parsing: a parsed-and-reserialised body differs
   * in whitespace or key order and never verifies. Bytes are hashed as they are.
   */
  rawBody: string | Uint8Array;
  /** The request's headers: a WHATWG `Headers` (fetch, Yoga) or node's `req.headers`. Case-insensitive. */
  headers: WebhookHeaders;
  /**
   * The endpoint's HMAC secrets, as Herald showed them (either form of an older secret works: the
   * original `whsec_` base64url string or its Standard Webhooks form). During a rotation, list both
   * the new and the old one; a delivery is accepted when any `v1` entry matches any secret. A `whpk_`
   * public key listed here counts as one of `publicKeys`. Give `secrets`, `publicKeys` or both;
   * neither throws a `TypeError`.
   */
  secrets?: readonly string[];
  /**
   * The endpoint's ed25519 public keys (`whpk_…`), for an endpoint with asymmetric signatures: a
   * delivery is accepted when any `v1a` entry of `webhook-signature` verifies under any of them.
   * Implies the Standard Webhooks scheme (Stripe's has no asymmetric form).
   */
  publicKeys?: readonly string[];
  /** Largest accepted distance between the signed `t` and `now`, in seconds. @default 300 */
  toleranceSec?: number;
  /** The receiver's clock, in Unix seconds. @default now */
  now?: number;
  /**
   * Which signature scheme to check. `auto` checks Standard Webhooks (`webhook-*` headers) when a
   * `webhook-signature` header is present, and Stripe's (`X-Webhook-*`) otherwise, so deliveries of
   * an older Herald that sends only `X-Webhook-*` keep verifying. A named scheme requires its headers
   * (`missing_header` otherwise). @default 'auto'
   */
  scheme?: WebhookSignatureScheme;
}

/** `standard`: `webhook-id/-timestamp/-signature`; `stripe`: `X-Webhook-ID/-Timestamp/-Signature`. */
export type WebhookSignatureScheme = 'auto' | 'standard' | 'stripe';

/** What a scheme's headers say once one of their signatures matched a secret. */
interface VerifiedHeaders {
  eventId: string;
  idHeader: string;
  timestampSec: number;
}

/**
 * Verifies one delivery and returns its parsed event. Checks, in order: the scheme's three headers
 * are present and well-formed; some `v1` matches some secret (constant-time comparison); the signed
 * timestamp is within `toleranceSec` of `now`; the body is a JSON event; the id header equals its `id`.
 *
 * @throws WebhookVerificationError with the `reason` of the first failed check; never returns an
 *   unverified event.
 * @throws TypeError for a caller error: no secrets, or a negative or non-finite `toleranceSec`.
 */
export function verifyWebhook(options: VerifyWebhookOptions): WebhookEvent {
  const { rawBody, headers } = options;
  // A `whpk_` public key listed among the secrets is a public key: receivers keep one list.
  const given = options.secrets ?? [];
  const secrets = given.filter((secret) => !secret.startsWith(WEBHOOK_PUBLIC_KEY_PREFIX));
  const publicKeys = [
    ...(options.publicKeys ?? []),
    ...given.filter((key) => key.startsWith(WEBHOOK_PUBLIC_KEY_PREFIX)),
  ];
  const toleranceSec = options.toleranceSec ?? DEFAULT_TOLERANCE_SEC;
  const now = options.now ?? Math.floor(Date.now() / 1000);
  if (secrets.length === 0 && publicKeys.length === 0) {
    throw new TypeError('verifyWebhook: at least one secret or public key is required');
  }
  if (options.scheme === 'stripe' && secrets.length === 0) {
    throw new TypeError('verifyWebhook: the stripe scheme needs secrets (it has no asymmetric form)');
  }
  if (!Number.isFinite(toleranceSec) || toleranceSec < 0) {
    throw new TypeError('verifyWebhook: toleranceSec must be a non-negative number');
  }

  const scheme = options.scheme ?? 'auto';
  const standard =
    scheme === 'standard' ||
    (scheme === 'auto' &&
      (secrets.length === 0 || readHeader(headers, STANDARD_WEBHOOK_SIGNATURE_HEADER) !== undefined));
  const { eventId, idHeader, timestampSec } = standard
    ? verifyStandardSignature(headers, secrets, publicKeys, rawBody)
    : verifyStripeSignature(headers, secrets, rawBody);

  if (Math.abs(now - timestampSec) > toleranceSec) {
    throw new WebhookVerificationError(
      'timestamp_outside_tolerance',
      `the signature's timestamp is more than ${toleranceSec} s from the receiver's clock`,
    );
  }

  const event = parseEvent(rawBody);
  if (event.id !== eventId) {
    throw new WebhookVerificationError('id_mismatch', `${idHeader} differs from the body's id`);
  }
  return event;
}

/** `X-Webhook-Signature: t=…,v1=<hex>` (Stripe's scheme), keyed with the whole secret string. */
function verifyStripeSignature(
  headers: WebhookHeaders,
  secrets: readonly string[],
  rawBody: string | Uint8Array,
): VerifiedHeaders {
  const eventId = requireHeader(headers, WEBHOOK_ID_HEADER);
  const timestampHeader = requireHeader(headers, WEBHOOK_TIMESTAMP_HEADER);
  const signatureHeader = requireHeader(headers, WEBHOOK_SIGNATURE_HEADER);
  const { timestampSec, signatures } = parseSignatureHeader(signatureHeader);
  if (!/^\d+$/.test(timestampHeader) || Number(timestampHeader) !== timestampSec) {
    throw new WebhookVerificationError(
      'malformed_header',
      `${WEBHOOK_TIMESTAMP_HEADER} must be Unix seconds equal to the signature's t`,
    );
  }
  const signed = secrets.some((secret) => {
    const expected = computeSignature(secret, timestampSec, rawBody);
    return signatures.some((signature) => timingSafeEqual(signature, expected));
  });
  if (!signed) {
    throw new WebhookVerificationError('no_matching_signature', 'no v1 signature matches a signing secret');
  }
  return { eventId, idHeader: WEBHOOK_ID_HEADER, timestampSec };
}

/**
 * Standard Webhooks' `webhook-signature`: `v1,<base64>` keyed with the decoded secret, `v1a,<base64>`
 * an ed25519 signature checked with the public keys.
 */
function verifyStandardSignature(
  headers: WebhookHeaders,
  secrets: readonly string[],
  publicKeys: readonly string[],
  rawBody: string | Uint8Array,
): VerifiedHeaders {
  const eventId = requireHeader(headers, STANDARD_WEBHOOK_ID_HEADER);
  const timestampHeader = requireHeader(headers, STANDARD_WEBHOOK_TIMESTAMP_HEADER);
  const { symmetric, asymmetric } = parseStandardSignatureHeader(
    requireHeader(headers, STANDARD_WEBHOOK_SIGNATURE_HEADER),
  );
  if (!/^\d{1,12}$/.test(timestampHeader)) {
    throw new WebhookVerificationError('malformed_header', `${STANDARD_WEBHOOK_TIMESTAMP_HEADER} must be Unix seconds`);
  }
  if (/[\r\n]/.test(eventId)) {
    throw new WebhookVerificationError('malformed_header', `${STANDARD_WEBHOOK_ID_HEADER} must be on one line`);
  }
  const timestampSec = Number(timestampHeader);
  const signed =
    secrets.some((secret) => {
      const expected = computeStandardSignature(standardWebhookKey(secret), eventId, timestampSec, rawBody);
      return symmetric.some((signature) => timingSafeEqual(signature, expected));
    }) ||
    publicKeys.some((publicKey) =>
      asymmetric.some((signature) => verifyAsymmetricSignature(publicKey, eventId, timestampSec, rawBody, signature)),
    );
  if (!signed) {
    throw new WebhookVerificationError('no_matching_signature', 'no v1 or v1a signature matches a key of the receiver');
  }
  return { eventId, idHeader: STANDARD_WEBHOOK_ID_HEADER, timestampSec };
}

function requireHeader(headers: WebhookHeaders, name: string): string {
  const value = readHeader(headers, name);
  if (value === undefined) throw new WebhookVerificationError('missing_header', `${name} header is missing`);
  return value;
}

function parseEvent(rawBody: string | Uint8Array): WebhookEvent {
  let parsed: unknown;
  try {
    const text = typeof rawBody === 'string' ? rawBody : new TextDecoder('utf-8', { fatal: true }).decode(rawBody);
    parsed = JSON.parse(text);
  } catch {
    throw new WebhookVerificationError('invalid_body', 'the body is not UTF-8 JSON');
  }
  if (!isWebhookEvent(parsed)) {
    throw new WebhookVerificationError('invalid_body', 'the body is not an event { id, type, created, data }');
  }
  return parsed;
}
