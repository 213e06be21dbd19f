import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/**
 * How a webhook signing secret is stored (docs/operations.md, "Webhook encryption keys"): AES-256-GCM under the
 * first key of the keyring, with the endpoint id as associated data, so a ciphertext copied onto
 * another endpoint's row does not open. The envelope is text, versioned, and names its key:
 *
 *   v1:<key id>:<base64 12-byte nonce>:<base64 ciphertext>:<base64 16-byte tag>
 *
 * A fresh random nonce per seal: 2^32 seals under one key keep the nonce collision chance below
 * 2^-32 (NIST SP 800-38D), far beyond the secrets a keyring ever seals.
 */

/** The envelope's format version; a new format gets a new prefix and both are read during a change. */
export const ENVELOPE_VERSION = 'v1';
const ALGORITHM = 'aes-256-gcm';
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const SEPARATOR = ':';

/** One key of a keyring (see `HERALD_ENCRYPTION_KEYS` in @herald/config). */
export interface SecretKey {
  readonly id: string;
  /** 32 bytes. */
  readonly key: Uint8Array;
}

/** The first key seals; every key opens. */
export type SecretKeyring = readonly [SecretKey, ...SecretKey[]];

/** Why an envelope did not open. Its message never holds secret material. */
export class SecretUnreadableError extends Error {
  override readonly name = 'SecretUnreadableError';
  readonly code = 'SECRET_UNREADABLE';
  constructor(
    /** `unknown-key`: no key of the keyring has the envelope's id; `authentication`: the key or the endpoint is not the one it was sealed with (or the bytes were altered); `malformed`: not an envelope. */
    readonly reason: 'unknown-key' | 'authentication' | 'malformed',
    readonly keyId: string | undefined,
    readonly endpointId: string,
  ) {
    super(
      reason === 'unknown-key'
        ? `the signing secret of endpoint ${endpointId} is sealed under key "${keyId}", which HERALD_ENCRYPTION_KEYS does not list`
        : reason === 'authentication'
          ? `the signing secret of endpoint ${endpointId} does not open with key "${keyId}" of HERALD_ENCRYPTION_KEYS (a different key under the same id, or a ciphertext moved from another endpoint)`
          : `the signing secret of endpoint ${endpointId} is not a ${ENVELOPE_VERSION} envelope`,
    );
  }
}

/** Seals `plaintext` for `endpointId` under the keyring's first key. */
export function sealSecret(keyring: SecretKeyring, endpointId: string, plaintext: string): string {
  const { id, key } = keyring[0];
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv(ALGORITHM, key, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(Buffer.from(endpointId, 'utf8'));
  const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return [
    ENVELOPE_VERSION,
    id,
    nonce.toString('base64'),
    ciphertext.toString('base64'),
    cipher.getAuthTag().toString('base64'),
  ].join(SEPARATOR);
}

/**
 * Opens an envelope sealed for `endpointId` with the keyring key it names.
 * @throws SecretUnreadableError when the key is missing or wrong, the endpoint differs, or it is not an envelope
 */
export function openSecret(keyring: SecretKeyring, endpointId: string, envelope: string): string {
  const parts = envelope.split(SEPARATOR);
  if (parts.length !== 5 || parts[0] !== ENVELOPE_VERSION) {
    throw new SecretUnreadableError('malformed', undefined, endpointId);
  }
  const [, keyId, nonce, ciphertext, tag] = parts as [string, string, string, string, string];
  const key = keyring.find((candidate) => candidate.id === keyId);
  if (!key) throw new SecretUnreadableError('unknown-key', keyId, endpointId);
  const tagBytes = Buffer.from(tag, 'base64');
  const nonceBytes = Buffer.from(nonce, 'base64');
  if (tagBytes.length !== TAG_BYTES || nonceBytes.length !== NONCE_BYTES) {
    throw new SecretUnreadableError('malformed', keyId, endpointId);
  }
  try {
    const decipher = createDecipheriv(ALGORITHM, key.key, nonceBytes, { authTagLength: TAG_BYTES });
    decipher.setAAD(Buffer.from(endpointId, 'utf8'));
    decipher.setAuthTag(tagBytes);
    return Buffer.concat([decipher.update(Buffer.from(ciphertext, 'base64')), decipher.final()]).toString('utf8');
  } catch {
    throw new SecretUnreadableError('authentication', keyId, endpointId);
  }
}

/** The id of the key an envelope is sealed under (undefined when it is not an envelope). */
export function envelopeKeyId(envelope: string): string | undefined {
  const [version, keyId] = envelope.split(SEPARATOR, 2);
  return version === ENVELOPE_VERSION ? keyId : undefined;
}
