import { sealSecret } from '@herald/db';
import { describe, expect, it } from 'vitest';
import { createSecretCache } from './secret-cache.js';

function keyring() {
  return [{ id: 'k1', key: Buffer.alloc(32, 3) }] as const;
}

describe('the opened-secret cache', () => {
  it('opens each envelope once: a hit does not decrypt again, until the TTL is over', () => {
    const ring = keyring();
    let now = 0;
    const cache = createSecretCache({ keyring: ring, ttlMs: 1_000, now: () => now });
    const sealed = [sealSecret(ring, 'we_a', 'whsec_new'), sealSecret(ring, 'we_a', 'whsec_old')];
    expect(cache.open('we_a', sealed)).toEqual(['whsec_new', 'whsec_old']);
    // Spoil the key: only a decryption would notice.
    ring[0].key.fill(0);
    now = 999;
    expect(cache.open('we_a', sealed)).toEqual(['whsec_new', 'whsec_old']);
    now = 1_000;
    expect(() => cache.open('we_a', sealed)).toThrow(/does not open/);
    expect(cache.size).toBe(0); // expired entries are dropped, not kept beside the failure
  });

  it('keeps at most maxEntries plaintexts, dropping the oldest', () => {
    const ring = keyring();
    const cache = createSecretCache({ keyring: ring, maxEntries: 2 });
    for (const endpoint of ['we_a', 'we_b', 'we_c']) cache.open(endpoint, [sealSecret(ring, endpoint, endpoint)]);
    expect(cache.size).toBe(2);
    cache.clear();
    expect(cache.size).toBe(0);
  });

  it('binds an entry to its endpoint: the same envelope presented for another endpoint does not open', () => {
    const ring = keyring();
    const cache = createSecretCache({ keyring: ring });
    const sealed = sealSecret(ring, 'we_a', 'whsec_a');
    expect(cache.open('we_a', [sealed])).toEqual(['whsec_a']);
    expect(() => cache.open('we_b', [sealed])).toThrow(/endpoint we_b/);
  });
});
