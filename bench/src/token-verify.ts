/**
 * Token verification cost: how long one HS256 verification takes, in process, for
 * the ways Herald has verified tokens. CPU-bound and single-threaded, so a plain loop measures it:
 *
 * - raw node:crypto: HMAC-SHA256 over `header.payload`, a constant-time compare, JSON.parse of the claims
 *   and an `exp` check (the floor any verifier pays);
 * - jose with a `Uint8Array` secret: Herald's first verifier, which imports the key into WebCrypto on every call;
 * - Herald's verifier with its cache off: jose with a KeyObject made once;
 * - Herald's verifier as configured: the same, plus the cache of verified tokens, fed `clients` distinct
 *   tokens round-robin (one per client, as a pod sees them).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createTokenVerifier, signToken } from '@herald/auth';
import { jwtVerify } from 'jose';
import { median, round } from './common.js';

export interface TokenVerifyConfig {
  /** Verifications per trial and variant. */
  iterations: number;
  trials: number;
  /** Distinct tokens in rotation (clients of one pod). */
  clients: number;
}

export interface TokenVerifyRow {
  label: string;
  /** Median over trials. */
  usPerVerify: number;
  verifiesPerSec: number;
}

export interface TokenVerifyResult {
  config: TokenVerifyConfig;
  rows: TokenVerifyRow[];
}

const SECRET = 'bench-secret-0123456789abcdef-0123456789';

export async function runTokenVerify(config: TokenVerifyConfig): Promise<TokenVerifyResult> {
  const tokens = await Promise.all(
    Array.from({ length: config.clients }, (_, i) => signToken(SECRET, { sub: `user-${i}`, orgs: ['bench'] })),
  );
  const secretBytes = new TextEncoder().encode(SECRET);
  const uncached = createTokenVerifier({ key: { kind: 'secret', secret: SECRET }, cacheSize: 0 });
  const cached = createTokenVerifier({ key: { kind: 'secret', secret: SECRET } });
  const variants: Array<[string, (token: string) => Promise<unknown> | unknown]> = [
    ['raw node:crypto HS256 (HMAC + compare + claims)', rawVerify],
    ['jose, Uint8Array secret (key imported per call)', (token) => jwtVerify(token, secretBytes)],
    ['Herald verifier, cache off (KeyObject made once)', (token) => uncached.verify(token)],
    [`Herald verifier (verified-token cache, ${config.clients} tokens)`, (token) => cached.verify(token)],
  ];
  const rows: TokenVerifyRow[] = [];
  for (const [label, verify] of variants) {
    for (const token of tokens) await verify(token); // warm-up: JIT, key import, cache fill
    const perTrial: number[] = [];
    for (let trial = 0; trial < config.trials; trial++) {
      const start = process.hrtime.bigint();
      for (let i = 0; i < config.iterations; i++) await verify(tokens[i % tokens.length]!);
      perTrial.push(Number(process.hrtime.bigint() - start) / 1000 / config.iterations);
    }
    const us = median(perTrial);
    rows.push({ label, usPerVerify: round(us, 2), verifiesPerSec: round(1_000_000 / us, 0) });
  }
  return { config, rows };
}

function rawVerify(token: string): unknown {
  const [header, payload, signature] = token.split('.') as [string, string, string];
  const expected = createHmac('sha256', SECRET).update(`${header}.${payload}`).digest();
  const given = Buffer.from(signature, 'base64url');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw new Error('bad signature');
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { exp?: number };
  if (!claims.exp || claims.exp * 1000 <= Date.now()) throw new Error('expired');
  return claims;
}

export function tokenVerifyMarkdown(result: TokenVerifyResult | null | undefined): string[] {
  const lines = ['', '## Token verification: one HS256 token, in process', ''];
  if (!result) return [...lines, 'Not run.'];
  const raw = result.rows[0]?.usPerVerify ?? Number.NaN;
  lines.push('| verifier | µs/verify | verifies/s | × raw cost |', '|---|---:|---:|---:|');
  for (const row of result.rows) {
    lines.push(
      `| ${row.label} | ${row.usPerVerify} | ${row.verifiesPerSec.toLocaleString('en')} | ${round(row.usPerVerify / raw, 2)}× |`,
    );
  }
  lines.push(
    '',
    `${result.config.iterations.toLocaleString('en')} verifications per trial, median of ${result.config.trials} trials, after a warm-up; one process, awaited one at a time.`,
  );
  return lines;
}
