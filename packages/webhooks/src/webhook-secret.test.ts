import { describe, expect, it } from 'vitest';
import { generateWebhookSecret, WEBHOOK_SECRET_BYTES } from './webhook-secret.js';

describe('generateWebhookSecret', () => {
  it('is whsec_ followed by base64url of 32 random bytes', () => {
    const secret = generateWebhookSecret();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);
    expect(Buffer.from(secret.slice('whsec_'.length), 'base64url')).toHaveLength(WEBHOOK_SECRET_BYTES);
    expect(WEBHOOK_SECRET_BYTES).toBeGreaterThanOrEqual(24);
  });

  it('never repeats', () => {
    const secrets = new Set(Array.from({ length: 1_000 }, generateWebhookSecret));
    expect(secrets.size).toBe(1_000);
  });
});
