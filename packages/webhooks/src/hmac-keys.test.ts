import { describe, expect, it } from 'vitest';
import {
  CACHED_SECRET_IDLE_MS,
  cachedHmacSecrets,
  clearHmacKeyCache,
  hmacKeysOf,
  MAX_CACHED_SECRETS,
} from './hmac-keys.js';

// The signing keys kept per secret: derived once while a secret is in use, bounded by count (least
// recently used dropped first) and by idleness, so a rotated-out or revoked secret leaves memory.

const secret = (name: string) => `whsec_${Buffer.from(`hmac-keys-test ${name}`).toString('base64')}`;

describe('hmacKeysOf', () => {
  it('derives a secret’s keys once and hands the same key objects out again', () => {
    const first = hmacKeysOf(secret('same'), 0);
    const again = hmacKeysOf(secret('same'), 1);
    expect(again.standard).toBe(first.standard);
    expect(again.stripe).toBe(first.stripe);
    expect(first.standard.export()).toEqual(Buffer.from('hmac-keys-test same'));
    expect(first.stripe.export()).toEqual(Buffer.from(secret('same')));
  });

  it('drops a secret unused for longer than the idle limit, once keys are asked for again', () => {
    clearHmacKeyCache();
    const t0 = 1_000_000;
    const idle = hmacKeysOf(secret('idle'), t0);
    const busy = hmacKeysOf(secret('busy'), t0);
    // At the limit nothing is dropped.
    expect(hmacKeysOf(secret('busy'), t0 + CACHED_SECRET_IDLE_MS)).toBe(busy);
    expect(cachedHmacSecrets()).toBe(2);
    // Past it for "idle" (the least recently used): the next call, for any secret, drops it.
    expect(hmacKeysOf(secret('busy'), t0 + CACHED_SECRET_IDLE_MS + 1)).toBe(busy);
    expect(cachedHmacSecrets()).toBe(1);
    expect(hmacKeysOf(secret('idle'), t0 + CACHED_SECRET_IDLE_MS + 1)).not.toBe(idle);
  });

  it('keeps at most the limit, dropping the least recently used first', () => {
    clearHmacKeyCache();
    const t = 0;
    const names = Array.from({ length: MAX_CACHED_SECRETS }, (_, i) => `many ${i}`);
    const kept = names.map((name) => hmacKeysOf(secret(name), t));
    expect(cachedHmacSecrets()).toBe(MAX_CACHED_SECRETS);
    // "many 0" is used again: "many 1" is now the least recently used and makes room for a new one.
    expect(hmacKeysOf(secret('many 0'), t)).toBe(kept[0]);
    hmacKeysOf(secret('one more'), t);
    expect(cachedHmacSecrets()).toBe(MAX_CACHED_SECRETS);
    expect(hmacKeysOf(secret('many 0'), t)).toBe(kept[0]);
    expect(hmacKeysOf(secret('many 2'), t)).toBe(kept[2]);
    expect(hmacKeysOf(secret('many 1'), t)).not.toBe(kept[1]);
  });
});
