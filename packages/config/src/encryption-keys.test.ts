import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { encryptionKeys, generateEncryptionKey, parseEncryptionKeys } from './encryption-keys.js';
import { InvalidConfigError, parseEnv } from './parse-env.js';

const KEY_A = Buffer.alloc(32, 0xa1).toString('base64');
const KEY_B = Buffer.alloc(32, 0xb2).toString('base64');

describe('parseEncryptionKeys', () => {
  it('reads ids and 32-byte keys in order, the first one first', () => {
    const parsed = parseEncryptionKeys(` k2:${KEY_B} , k1:${KEY_A}`);
    expect('keys' in parsed && parsed.keys.map((key) => [key.id, key.key.toString('base64')])).toEqual([
      ['k2', KEY_B],
      ['k1', KEY_A],
    ]);
  });

  it.each([
    ['', /expected <id>:<base64 32-byte key>/],
    [KEY_A, /entry 1: expected <id>:<base64/],
    [`k 1:${KEY_A}`, /entry 1: expected <id>/],
    [`k1:${Buffer.alloc(16).toString('base64')}`, /entry 1 \("k1"\): the key must be 32 bytes/],
    [`k1:${KEY_A.slice(0, 20)}!${KEY_A.slice(21)}`, /entry 1 \("k1"\): the key must be 32 bytes/],
    [`k1:${KEY_A},k1:${KEY_B}`, /entry 2 \("k1"\): the id "k1" is listed twice/],
  ])('refuses %j', (text, reason) => {
    const parsed = parseEncryptionKeys(text);
    expect('error' in parsed && parsed.error).toMatch(reason);
    // The reason never repeats key material.
    if ('error' in parsed) expect(parsed.error).not.toContain(KEY_A.slice(0, 12));
  });

  it('accepts what generateEncryptionKey and openssl rand -base64 32 produce', () => {
    const generated = parseEncryptionKeys(generateEncryptionKey('dev'));
    expect('keys' in generated && generated.keys[0].key).toHaveLength(32);
  });
});

describe('HERALD_ENCRYPTION_KEYS in an env schema', () => {
  const schema = z.object({ HERALD_ENCRYPTION_KEYS: encryptionKeys() });

  it('is one line naming the variable when missing or malformed', () => {
    for (const env of [{}, { HERALD_ENCRYPTION_KEYS: 'k1:short' }]) {
      let lines: string[] = [];
      try {
        parseEnv(schema, env);
      } catch (error) {
        if (error instanceof InvalidConfigError) lines = error.lines;
      }
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^HERALD_ENCRYPTION_KEYS: /);
    }
  });
});
