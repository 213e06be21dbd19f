import { createHmac, type Hmac, type KeyObject } from 'node:crypto';
import { WebhookVerificationError } from './webhook-verification-error.js';

/** The only signature scheme Herald emits; entries of other schemes (`v0`, a future `v2`) are ignored. */
export const SIGNATURE_SCHEME = 'v1';
/** A `v1` signature is a hex HMAC-SHA256: 32 bytes, 64 hex digits. */
const SIGNATURE_HEX_PATTERN = /^[0-9a-f]{64}$/i;
/** Unix seconds, digits only: no sign, no fraction, no exponent. */
const TIMESTAMP_PATTERN = /^\d{1,12}$/;

/** A parsed `X-Webhook-Signature` header. */
export interface SignatureHeader {
  /** The signed `t`, in Unix seconds. */
  timestampSec: number;
  /** Every `v1` entry, decoded to its 32 bytes. */
  signatures: Buffer[];
}

/**
 * HMAC-SHA256 keyed with the whole secret string over `<t>.<raw body>` (Stripe's scheme). A byte
 * body is hashed as received, so a receiver never has to re-encode what it read off the wire.
 * @param secret the secret, or its UTF-8 bytes as a key object (`hmacKeysOf(secret).stripe`)
 */
export function computeSignature(
  secret: string | KeyObject,
  timestampSec: number,
  rawBody: string | Uint8Array,
): Buffer {
  return signatureHmac(secret, timestampSec, rawBody).digest();
}

/** {@link computeSignature}'s HMAC, fed and not yet digested (a sender digests it to hex at once). */
export function signatureHmac(secret: string | KeyObject, timestampSec: number, rawBody: string | Uint8Array): Hmac {
  return createHmac('sha256', secret).update(`${timestampSec}.`).update(rawBody);
}

/** `t=<unix seconds>,v1=<hex>[,v1=<hex>…]`, one `v1` per signature, in the order given. */
export function formatSignatureHeader(timestampSec: number, signatures: readonly Buffer[]): string {
  return [
    `t=${timestampSec}`,
    ...signatures.map((signature) => `${SIGNATURE_SCHEME}=${signature.toString('hex')}`),
  ].join(',');
}

/**
 * Parses an `X-Webhook-Signature` value. Entries are `key=value` separated by commas (spaces around
 * them tolerated); exactly one `t` and at least one `v1` are required, unknown schemes are skipped.
 * @throws WebhookVerificationError `malformed_header` for anything else.
 */
export function parseSignatureHeader(value: string): SignatureHeader {
  let timestamp: string | undefined;
  const signatures: Buffer[] = [];
  for (const entry of value.split(',')) {
    const separator = entry.indexOf('=');
    if (separator <= 0) throw malformed('every entry must be key=value');
    const key = entry.slice(0, separator).trim();
    const entryValue = entry.slice(separator + 1).trim();
    if (key === 't') {
      if (timestamp !== undefined) throw malformed('t appears more than once');
      if (!TIMESTAMP_PATTERN.test(entryValue)) throw malformed('t must be Unix seconds');
      timestamp = entryValue;
    } else if (key === SIGNATURE_SCHEME) {
      if (!SIGNATURE_HEX_PATTERN.test(entryValue)) throw malformed('v1 must be 64 hex digits');
      signatures.push(Buffer.from(entryValue, 'hex'));
    }
  }
  if (timestamp === undefined) throw malformed('t is missing');
  if (signatures.length === 0) throw malformed('no v1 signature');
  return { timestampSec: Number(timestamp), signatures };
}

function malformed(why: string): WebhookVerificationError {
  return new WebhookVerificationError('malformed_header', `X-Webhook-Signature is malformed: ${why}`);
}
