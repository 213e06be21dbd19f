import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign, verify } from 'node:crypto';

/*
 * Asymmetric Standard Webhooks signatures (`v1a`, ed25519), for endpoints that ask for them: Herald
 * keeps the signing key (`whsk_…`), the receiver holds only the public key (`whpk_…`), so a leaked
 * receiver configuration cannot forge deliveries. Both are `whsk_`/`whpk_` + standard base64 of the raw
 * 32-byte ed25519 seed / public key, as the Standard Webhooks specification writes them.
 */

/** Prefix of an ed25519 signing key, stored by Herald like a secret and never shown. */
export const WEBHOOK_SIGNING_KEY_PREFIX = 'whsk_';
/** Prefix of an ed25519 public key, what a receiver verifies `v1a` signatures with. */
export const WEBHOOK_PUBLIC_KEY_PREFIX = 'whpk_';
const ED25519_KEY_BYTES = 32;
/** DER headers that turn a raw ed25519 seed / public key into PKCS#8 / SPKI (RFC 8410). */
const PKCS8_ED25519_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
const SPKI_ED25519_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

export interface WebhookSigningKeyPair {
  /** `whsk_…`: stored by Herald, signs. */
  signingKey: string;
  /** `whpk_…`: given to the receiver, verifies. */
  publicKey: string;
}

/** A new ed25519 key pair for `v1a` signatures. */
export function generateWebhookSigningKeyPair(): WebhookSigningKeyPair {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const seed = privateKey.export({ format: 'der', type: 'pkcs8' }).subarray(PKCS8_ED25519_PREFIX.length);
  const raw = publicKey.export({ format: 'der', type: 'spki' }).subarray(SPKI_ED25519_PREFIX.length);
  return {
    signingKey: WEBHOOK_SIGNING_KEY_PREFIX + seed.toString('base64'),
    publicKey: WEBHOOK_PUBLIC_KEY_PREFIX + raw.toString('base64'),
  };
}

/** Whether a stored signing secret is an ed25519 signing key (signs `v1a`) rather than an HMAC secret. */
export function isWebhookSigningKey(secret: string): boolean {
  return secret.startsWith(WEBHOOK_SIGNING_KEY_PREFIX);
}

/**
 * The `whpk_…` public key of a `whsk_…` signing key.
 * @throws TypeError when `signingKey` is not `whsk_` + base64 of 32 bytes
 */
export function webhookPublicKeyOf(signingKey: string): string {
  const raw = createPublicKey(privateKeyObject(signingKey))
    .export({ format: 'der', type: 'spki' })
    .subarray(SPKI_ED25519_PREFIX.length);
  return WEBHOOK_PUBLIC_KEY_PREFIX + raw.toString('base64');
}

/** The ed25519 signature of `<id>.<timestamp>.<raw body>` with a `whsk_…` key. */
export function computeAsymmetricSignature(
  signingKey: string,
  eventId: string,
  timestampSec: number,
  rawBody: string | Uint8Array,
): Buffer {
  return sign(null, signedContent(eventId, timestampSec, rawBody), privateKeyObject(signingKey));
}

/** Whether `signature` is the ed25519 signature of `<id>.<timestamp>.<raw body>` under a `whpk_…` key. */
export function verifyAsymmetricSignature(
  publicKey: string,
  eventId: string,
  timestampSec: number,
  rawBody: string | Uint8Array,
  signature: Buffer,
): boolean {
  return verify(null, signedContent(eventId, timestampSec, rawBody), publicKeyObject(publicKey), signature);
}

function signedContent(eventId: string, timestampSec: number, rawBody: string | Uint8Array): Buffer {
  const body = typeof rawBody === 'string' ? Buffer.from(rawBody, 'utf8') : Buffer.from(rawBody);
  return Buffer.concat([Buffer.from(`${eventId}.${timestampSec}.`, 'utf8'), body]);
}

function privateKeyObject(signingKey: string): KeyObject {
  const seed = decodeKey(signingKey, WEBHOOK_SIGNING_KEY_PREFIX);
  return createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: 'der', type: 'pkcs8' });
}

function publicKeyObject(publicKey: string): KeyObject {
  const raw = decodeKey(publicKey, WEBHOOK_PUBLIC_KEY_PREFIX);
  return createPublicKey({ key: Buffer.concat([SPKI_ED25519_PREFIX, raw]), format: 'der', type: 'spki' });
}

function decodeKey(value: string, prefix: string): Buffer {
  const body = value.startsWith(prefix) ? value.slice(prefix.length) : '';
  const key = /^[A-Za-z0-9+/]{43}=$/.test(body) ? Buffer.from(body, 'base64') : Buffer.alloc(0);
  if (key.length !== ED25519_KEY_BYTES) {
    throw new TypeError(`expected ${prefix} followed by base64 of ${ED25519_KEY_BYTES} bytes`);
  }
  return key;
}
