import { createHmac } from 'node:crypto';
import { WebhookVerificationError } from './webhook-verification-error.js';

/** The symmetric Standard Webhooks scheme; entries of other versions (`v1a`, …) are skipped. */
export const STANDARD_SIGNATURE_VERSION = 'v1';
/** A `v1` Standard Webhooks signature: base64 of a 32-byte HMAC-SHA256 (44 characters, padded). */
const STANDARD_SIGNATURE_PATTERN = /^[A-Za-z0-9+/]{43}=$/;

/**
 * Standard Webhooks' `v1` signature: HMAC-SHA256 keyed with the decoded secret over
 * `<id>.<timestamp>.<raw body>`. Bytes of a body are hashed as received.
 */
export function computeStandardSignature(
  key: Uint8Array,
  eventId: string,
  timestampSec: number,
  rawBody: string | Uint8Array,
): Buffer {
  return createHmac('sha256', key).update(`${eventId}.${timestampSec}.`).update(rawBody).digest();
}

/** `v1,<base64>[ v1,<base64>…]`, one entry per signature, in the order given. */
export function formatStandardSignatureHeader(signatures: readonly Buffer[]): string {
  return signatures.map((signature) => `${STANDARD_SIGNATURE_VERSION},${signature.toString('base64')}`).join(' ');
}

/**
 * Every `v1` signature of a `webhook-signature` value, decoded to its 32 bytes. Entries are separated
 * by spaces; entries of other versions are skipped.
 * @throws WebhookVerificationError `malformed_header` when an entry is not `<version>,<value>`, a `v1`
 *   value is not base64 of 32 bytes, or there is no `v1` entry.
 */
export function parseStandardSignatureHeader(value: string): Buffer[] {
  const signatures: Buffer[] = [];
  for (const entry of value.split(' ')) {
    if (entry === '') continue;
    const separator = entry.indexOf(',');
    if (separator <= 0) throw malformed('every entry must be <version>,<signature>');
    if (entry.slice(0, separator) !== STANDARD_SIGNATURE_VERSION) continue;
    const signature = entry.slice(separator + 1);
    if (!STANDARD_SIGNATURE_PATTERN.test(signature)) throw malformed('v1 must be base64 of 32 bytes');
    signatures.push(Buffer.from(signature, 'base64'));
  }
  if (signatures.length === 0) throw malformed('no v1 signature');
  return signatures;
}

function malformed(why: string): WebhookVerificationError {
  return new WebhookVerificationError('malformed_header', `webhook-signature is malformed: ${why}`);
}
