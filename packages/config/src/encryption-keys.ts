import { randomBytes } from 'node:crypto';
import { z } from 'zod';

/**
 * The `HERALD_ENCRYPTION_KEYS` keyring (docs/operations.md, "Webhook encryption keys"): comma-separated entries
 * `<id>:<base64 of 32 random bytes>`, e.g. `k2:…,k1:…`. The FIRST key encrypts everything written from
 * now on; every key decrypts, so an old key stays listed until `pnpm secrets rotate-key` has moved
 * every row to the first one. The id is stored beside each ciphertext and names the key that opens it.
 *
 * Error messages name the entry by position and id, never repeat key material.
 */

/** AES-256: a key is 32 bytes. */
export const ENCRYPTION_KEY_BYTES = 32;
/** Ids are stored in every envelope, so they stay short and free of the separators (`:` and `,`). */
const KEY_ID_PATTERN = /^[A-Za-z0-9_-]{1,32}$/;

export interface EncryptionKey {
  /** Stored beside each ciphertext; names the key that opens it. */
  readonly id: string;
  /** 32 bytes. */
  readonly key: Buffer;
}

/** At least one key; the first encrypts. */
export type EncryptionKeyring = readonly [EncryptionKey, ...EncryptionKey[]];

/**
 * Parses a keyring in the `HERALD_ENCRYPTION_KEYS` format.
 * @returns the keys in order, or the reason it is malformed (one sentence, no key material)
 */
export function parseEncryptionKeys(text: string): { keys: EncryptionKeyring } | { error: string } {
  const entries = text
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry.length > 0);
  if (entries.length === 0) return { error: 'expected <id>:<base64 32-byte key>, comma-separated' };
  const keys: EncryptionKey[] = [];
  for (const [index, entry] of entries.entries()) {
    const colon = entry.indexOf(':');
    const id = colon < 0 ? '' : entry.slice(0, colon);
    const where = `entry ${index + 1}${KEY_ID_PATTERN.test(id) ? ` ("${id}")` : ''}`;
    if (colon < 0 || !KEY_ID_PATTERN.test(id)) {
      return { error: `${where}: expected <id>:<base64 32-byte key> with an id of letters, digits, - or _` };
    }
    const body = entry.slice(colon + 1);
    const key = Buffer.from(body, 'base64');
    // Buffer.from skips characters that are not base64: compare the round trip to refuse typos.
    if (key.length !== ENCRYPTION_KEY_BYTES || key.toString('base64').replace(/=+$/, '') !== body.replace(/=+$/, '')) {
      return {
        error: `${where}: the key must be ${ENCRYPTION_KEY_BYTES} bytes in standard base64 (openssl rand -base64 32)`,
      };
    }
    if (keys.some((known) => known.id === id)) return { error: `${where}: the id "${id}" is listed twice` };
    keys.push({ id, key });
  }
  return { keys: keys as unknown as EncryptionKeyring };
}

/** A zod schema for `HERALD_ENCRYPTION_KEYS`; the parsed value is the keyring. */
export function encryptionKeys() {
  return z
    .string({ error: 'required: <id>:<base64 32-byte key>, e.g. k1:$(openssl rand -base64 32)' })
    .transform((text, ctx): EncryptionKeyring => {
      const parsed = parseEncryptionKeys(text);
      if ('error' in parsed) {
        ctx.addIssue({ code: 'custom', message: parsed.error });
        return z.NEVER;
      }
      return parsed.keys;
    });
}

/** A new random key in the keyring format (`<id>:<base64>`), e.g. for a development data directory. */
export function generateEncryptionKey(id: string): string {
  if (!KEY_ID_PATTERN.test(id)) throw new TypeError(`generateEncryptionKey: invalid key id "${id}"`);
  return `${id}:${randomBytes(ENCRYPTION_KEY_BYTES).toString('base64')}`;
}
