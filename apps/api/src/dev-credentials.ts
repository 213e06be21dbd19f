import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { signToken } from '@herald/auth';
import { type EncryptionKeyring, generateEncryptionKey, parseEncryptionKeys } from '@herald/config';

/** File in the data directory holding the generated HS256 secret (mode 0600). */
const DEV_SECRET_FILE = 'dev-jwt-secret';
const DEV_SECRET_BYTES = 32;
/** File in the data directory holding the generated webhook-secret keyring (mode 0600), in the `HERALD_ENCRYPTION_KEYS` format. */
const DEV_ENCRYPTION_KEYS_FILE = 'dev-encryption-keys';
/** A data directory that lives only in memory (tests): its key does too. */
const IN_MEMORY_DATA_DIR = 'memory://';

/** The demo user the printed development token names. */
export const DEMO_USER = { sub: 'demo-user', name: 'Demo User', orgs: ['demo'] };

/**
 * Embedded mode without JWT_SECRET: reads the development secret from the data directory, creating it
 * on first start, so tokens keep working across restarts.
 */
export function loadOrCreateDevSecret(dataDir: string): string {
  const path = join(dataDir, DEV_SECRET_FILE);
  try {
    const existing = readFileSync(path, 'utf8').trim();
    if (existing.length >= 32) return existing;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  mkdirSync(dataDir, { recursive: true });
  const secret = randomBytes(DEV_SECRET_BYTES).toString('base64url');
  writeFileSync(path, `${secret}\n`, { mode: 0o600 });
  return secret;
}

/**
 * Embedded mode without HERALD_ENCRYPTION_KEYS: the keyring that seals webhook secrets, read from the
 * data directory and created there on first start (so the sealed secrets open after a restart). An
 * in-memory data directory gets a key of its own that ends with the process, like its data.
 * @throws Error naming the file when it does not hold a keyring
 */
export function loadOrCreateDevEncryptionKeys(dataDir: string): EncryptionKeyring {
  if (dataDir.startsWith(IN_MEMORY_DATA_DIR)) return parseOrThrow(generateEncryptionKey('dev'), IN_MEMORY_DATA_DIR);
  const path = join(dataDir, DEV_ENCRYPTION_KEYS_FILE);
  try {
    return parseOrThrow(readFileSync(path, 'utf8').trim(), path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  mkdirSync(dataDir, { recursive: true });
  const keys = generateEncryptionKey('dev');
  try {
    // `wx`: never replace a key that appeared meanwhile; the secrets it sealed would no longer open.
    writeFileSync(path, `${keys}\n`, { mode: 0o600, flag: 'wx' });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    return parseOrThrow(readFileSync(path, 'utf8').trim(), path);
  }
  return parseOrThrow(keys, path);
}

function parseOrThrow(text: string, source: string): EncryptionKeyring {
  const parsed = parseEncryptionKeys(text);
  if ('error' in parsed) throw new Error(`HERALD_ENCRYPTION_KEYS: ${source} does not hold a keyring: ${parsed.error}`);
  return parsed.keys;
}

/** A 30-day token for the demo user in org `demo`, for pasting into GraphiQL's headers. */
export function signDevToken(secret: string, issuer?: string, audience?: string): Promise<string> {
  return signToken(secret, DEMO_USER, {
    expiresIn: '30d',
    ...(issuer ? { issuer } : {}),
    ...(audience ? { audience } : {}),
  });
}
