import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { signToken } from '@herald/auth';

/** File in the data directory holding the generated HS256 secret (mode 0600). */
const DEV_SECRET_FILE = 'dev-jwt-secret';
const DEV_SECRET_BYTES = 32;

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

/** A 30-day token for the demo user in org `demo`, for pasting into GraphiQL's headers. */
export function signDevToken(secret: string, issuer?: string, audience?: string): Promise<string> {
  return signToken(secret, DEMO_USER, {
    expiresIn: '30d',
    ...(issuer ? { issuer } : {}),
    ...(audience ? { audience } : {}),
  });
}
