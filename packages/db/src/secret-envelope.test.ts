import { describe, expect, it } from 'vitest';
import { envelopeKeyId, openSecret, type SecretKeyring, SecretUnreadableError, sealSecret } from './secret-envelope.js';

const K1 = { id: 'k1', key: Buffer.alloc(32, 1) };
const K2 = { id: 'k2', key: Buffer.alloc(32, 2) };
const SECRET = `whsec_${Buffer.alloc(32, 9).toString('base64')}`;

function reason(keyring: SecretKeyring, endpointId: string, envelope: string): string | undefined {
  try {
    openSecret(keyring, endpointId, envelope);
    return undefined;
  } catch (error) {
    return error instanceof SecretUnreadableError ? error.reason : 'other';
  }
}

describe('sealed secrets', () => {
  it('seal under the first key, in a versioned envelope holding neither the secret nor its key bytes', () => {
    const sealed = sealSecret([K2, K1], 'we_a', SECRET);
    expect(sealed).toMatch(/^v1:k2:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$/);
    expect(envelopeKeyId(sealed)).toBe('k2');
    expect(sealed).not.toContain(SECRET.slice('whsec_'.length, 20));
    expect(sealSecret([K2, K1], 'we_a', SECRET)).not.toBe(sealed); // a fresh nonce every time
    expect(openSecret([K2, K1], 'we_a', sealed)).toBe(SECRET);
    expect(openSecret([K1, K2], 'we_a', sealed)).toBe(SECRET); // any key of the keyring opens
  });

  it('do not open for another endpoint (a ciphertext moved to another row)', () => {
    const sealed = sealSecret([K1], 'we_a', SECRET);
    expect(reason([K1], 'we_b', sealed)).toBe('authentication');
  });

  it('do not open without their key, with a different key under the same id, or altered', () => {
    const sealed = sealSecret([K1], 'we_a', SECRET);
    expect(reason([K2], 'we_a', sealed)).toBe('unknown-key');
    expect(reason([{ id: 'k1', key: Buffer.alloc(32, 7) }], 'we_a', sealed)).toBe('authentication');
    const parts = sealed.split(':');
    const ciphertext = Buffer.from(parts[3] as string, 'base64');
    ciphertext[0] = (ciphertext[0] as number) ^ 1;
    parts[3] = ciphertext.toString('base64');
    expect(reason([K1], 'we_a', parts.join(':'))).toBe('authentication');
    expect(reason([K1], 'we_a', SECRET)).toBe('malformed');
  });

  it('name the variable, the endpoint and the key id in the error, never the secret', () => {
    const sealed = sealSecret([K1], 'we_a', SECRET);
    expect(() => openSecret([K2], 'we_a', sealed)).toThrow(/we_a .*"k1".*HERALD_ENCRYPTION_KEYS/);
    try {
      openSecret([{ id: 'k1', key: Buffer.alloc(32, 7) }], 'we_a', sealed);
    } catch (error) {
      expect(String(error)).not.toContain(SECRET);
    }
  });
});
