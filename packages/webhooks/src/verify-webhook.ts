import { timingSafeEqual } from 'node:crypto';
import { WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER } from './headers.js';
import { readHeader, type WebhookHeaders } from './read-header.js';
import { computeSignature, parseSignatureHeader } from './signature.js';
import { isWebhookEvent, type WebhookEvent } from './webhook-event.js';
import { WebhookVerificationError } from './webhook-verification-error.js';

/** Replay window: how far the signed `t` may be from the receiver's clock, either way (SPEC §7). */
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
   * The endpoint's secrets. During a rotation, list both the new and the old one; a delivery is
   * accepted when any `v1` entry matches any secret. An empty list throws a `TypeError`.
   */
  secrets: readonly string[];
  /** Largest accepted distance between the signed `t` and `now`, in seconds. @default 300 */
  toleranceSec?: number;
  /** The receiver's clock, in Unix seconds. @default now */
  now?: number;
}

/**
 * Verifies one delivery and returns its parsed event. Checks, in order: the three headers are
 * present and well-formed; some `v1` matches some secret (constant-time comparison); the signed
 * `t` is within `toleranceSec` of `now`; the body is a JSON event; `X-Webhook-ID` equals its `id`.
 *
 * @throws WebhookVerificationError with the `reason` of the first failed check; never returns an
 *   unverified event.
 * @throws TypeError for a caller error: no secrets, or a negative or non-finite `toleranceSec`.
 */
export function verifyWebhook(options: VerifyWebhookOptions): WebhookEvent {
  const { rawBody, headers, secrets } = options;
  const toleranceSec = options.toleranceSec ?? DEFAULT_TOLERANCE_SEC;
  const now = options.now ?? Math.floor(Date.now() / 1000);
  if (secrets.length === 0) throw new TypeError('verifyWebhook: at least one secret is required');
  if (!Number.isFinite(toleranceSec) || toleranceSec < 0) {
    throw new TypeError('verifyWebhook: toleranceSec must be a non-negative number');
  }

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

  if (Math.abs(now - timestampSec) > toleranceSec) {
    throw new WebhookVerificationError(
      'timestamp_outside_tolerance',
      `the signature's timestamp is more than ${toleranceSec} s from the receiver's clock`,
    );
  }

  const event = parseEvent(rawBody);
  if (event.id !== eventId) {
    throw new WebhookVerificationError('id_mismatch', `${WEBHOOK_ID_HEADER} differs from the body's id`);
  }
  return event;
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
