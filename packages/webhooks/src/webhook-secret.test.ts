import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import {
  generateWebhookSecret,
  standardWebhookKey,
  toStandardWebhookSecret,
  WEBHOOK_SECRET_BYTES,
} from './webhook-secret.js';

/** A secret as Herald issued them before Standard Webhooks: base64url, which `standardwebhooks` refuses. */
const LEGACY_SECRET = `whsec_${Buffer.alloc(32, 0xfb).toString('base64url')}`;

describe('generateWebhookSecret', () => {
  it('is whsec_ followed by standard base64 of 32 random bytes', () => {
    const secret = generateWebhookSecret();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(secret.slice('whsec_'.length), 'base64')).toHaveLength(WEBHOOK_SECRET_BYTES);
    expect(WEBHOOK_SECRET_BYTES).toBeGreaterThanOrEqual(24);
  });

  it('is its own Standard Webhooks form, which the standardwebhooks library accepts', () => {
    const secret = generateWebhookSecret();
    expect(toStandardWebhookSecret(secret)).toBe(secret);
    expect(() => new Webhook(secret)).not.toThrow();
  });

  it('never repeats', () => {
    const secrets = new Set(Array.from({ length: 1_000 }, generateWebhookSecret));
    expect(secrets.size).toBe(1_000);
  });
});

describe('toStandardWebhookSecret', () => {
  it('re-encodes an old base64url secret as standard base64 of the same key bytes', () => {
    expect(() => new Webhook(LEGACY_SECRET)).toThrow();
    const standard = toStandardWebhookSecret(LEGACY_SECRET);
    expect(standard).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(Buffer.from(standard.slice(6), 'base64')).toEqual(Buffer.from(LEGACY_SECRET.slice(6), 'base64url'));
    expect(standardWebhookKey(standard)).toEqual(standardWebhookKey(LEGACY_SECRET));
    expect(() => new Webhook(standard)).not.toThrow();
  });

  it('keys a secret that is not whsec_ + base64 by its UTF-8 bytes', () => {
    for (const secret of ['my own secret', 'whsec_with spaces!', 'whsec_ab']) {
      expect(standardWebhookKey(secret)).toEqual(Buffer.from(secret, 'utf8'));
      expect(toStandardWebhookSecret(secret)).toBe(`whsec_${Buffer.from(secret).toString('base64')}`);
    }
  });

  it('refuses an empty secret with a TypeError', () => {
    expect(() => standardWebhookKey('')).toThrow(TypeError);
  });
});
