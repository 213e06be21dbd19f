import { createHmac, type Hmac, type KeyObject } from 'node:crypto';
import { WebhookVerificationError } from './webhook-verification-error.js';

/** The symmetric Standard Webhooks scheme (HMAC-SHA256). */
export const STANDARD_SIGNATURE_VERSION = 'v1';
/** The asymmetric Standard Webhooks scheme (ed25519). Entries of other versions are skipped. */
export const ASYMMETRIC_SIGNATURE_VERSION = 'v1a';
/** A `v1` Standard Webhooks signature: base64 of a 32-byte HMAC-SHA256 (44 characters, padded). */
const STANDARD_SIGNATURE_PATTERN = /^[A-Za-z0-9+/]{43}=$/;
/** A `v1a` signature: base64 of a 64-byte ed25519 signature (88 characters, padded). */
const ASYMMETRIC_SIGNATURE_PATTERN = /^[A-Za-z0-9+/]{86}==$/;

/** A parsed `webhook-signature` header. */
export interface StandardSignatures {
  /** Every `v1` (HMAC) entry, decoded to its 32 bytes. */
  symmetric: Buffer[];
  /** Every `v1a` (ed25519) entry, decoded to its 64 bytes. */
  asymmetric: Buffer[];
}

/**
 * Standard Webhooks' `v1` signature: HMAC-SHA256 keyed with the decoded secret over
 * `<id>.<timestamp>.<raw body>`. Bytes of a body are hashed as received.
 * @param key the decoded secret (`standardWebhookKey`), or it as a key object (`hmacKeysOf(secret).standard`)
 */
export function computeStandardSignature(
  key: Uint8Array | KeyObject,
  eventId: string,
  timestampSec: number,
  rawBody: string | Uint8Array,
): Buffer {
  return standardSignatureHmac(key, eventId, timestampSec, rawBody).digest();
}

/** {@link computeStandardSignature}'s HMAC, fed and not yet digested (a sender digests it to base64 at once). */
export function standardSignatureHmac(
  key: Uint8Array | KeyObject,
  eventId: string,
  timestampSec: number,
  rawBody: string | Uint8Array,
): Hmac {
  return createHmac('sha256', key).update(`${eventId}.${timestampSec}.`).update(rawBody);
}

/** `v1,<base64>[ v1a,<base64>…]`: one entry per signature, `v1` ones first, each list in the order given. */
export function formatStandardSignatureHeader(
  signatures: readonly Buffer[],
  asymmetric: readonly Buffer[] = [],
): string {
  return [
    ...signatures.map((signature) => `${STANDARD_SIGNATURE_VERSION},${signature.toString('base64')}`),
    ...asymmetric.map((signature) => `${ASYMMETRIC_SIGNATURE_VERSION},${signature.toString('base64')}`),
  ].join(' ');
}

/**
 * Every `v1` and `v1a` signature of a `webhook-signature` value, decoded. Entries are separated by
 * spaces; entries of other versions are skipped.
 * @throws WebhookVerificationError `malformed_header` when an entry is not `<version>,<signature>`, a
 *   `v1`/`v1a` value is not base64 of 32/64 bytes, or there is neither a `v1` nor a `v1a` entry.
 */
export function parseStandardSignatureHeader(value: string): StandardSignatures {
  const symmetric: Buffer[] = [];
  const asymmetric: Buffer[] = [];
  for (const entry of value.split(' ')) {
    if (entry === '') continue;
    const separator = entry.indexOf(',');
    if (separator <= 0) throw malformed('every entry must be <version>,<signature>');
    const version = entry.slice(0, separator);
    const signature = entry.slice(separator + 1);
    if (version === STANDARD_SIGNATURE_VERSION) {
      if (!STANDARD_SIGNATURE_PATTERN.test(signature)) throw malformed('v1 must be base64 of 32 bytes');
      symmetric.push(Buffer.from(signature, 'base64'));
    } else if (version === ASYMMETRIC_SIGNATURE_VERSION) {
      if (!ASYMMETRIC_SIGNATURE_PATTERN.test(signature)) throw malformed('v1a must be base64 of 64 bytes');
      asymmetric.push(Buffer.from(signature, 'base64'));
    }
  }
  if (symmetric.length === 0 && asymmetric.length === 0) throw malformed('no v1 or v1a signature');
  return { symmetric, asymmetric };
}

function malformed(why: string): WebhookVerificationError {
  return new WebhookVerificationError('malformed_header', `webhook-signature is malformed: ${why}`);
}
