import Stripe from 'stripe';
import { describe, expect, it } from 'vitest';
import { WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER } from './headers.js';
import { signWebhook } from './sign-webhook.js';
import { verifyWebhook } from './verify-webhook.js';
import { generateWebhookSecret } from './webhook-secret.js';

/**
 * Herald signs like Stripe, so receivers' existing Stripe verifiers accept its deliveries.
 * This runs Stripe's own Node library (offline: constructing the client and verifying make no request).
 */
const stripe = new Stripe('sk_test_offline_never_used');
const OLD_SECRET = generateWebhookSecret();
const NEW_SECRET = generateWebhookSecret();
const event = {
  id: 'evt_stripe_compat',
  type: 'post.published',
  created: new Date().toISOString(),
  data: { id: 'post-1', title: 'Hello ✓' },
};
const rawBody = JSON.stringify(event);

describe("Stripe's webhooks.constructEvent", () => {
  it('accepts what signWebhook signed, with the whsec_ secret as is', () => {
    const headers = signWebhook({ eventId: event.id, rawBody, secrets: [OLD_SECRET] });
    const constructed = stripe.webhooks.constructEvent(rawBody, headers[WEBHOOK_SIGNATURE_HEADER]!, OLD_SECRET);
    expect(constructed).toEqual(event);
  });

  it('accepts a rotation delivery with either the old or the new secret alone', () => {
    const headers = signWebhook({ eventId: event.id, rawBody, secrets: [NEW_SECRET, OLD_SECRET] });
    const signature = headers[WEBHOOK_SIGNATURE_HEADER]!;
    expect(stripe.webhooks.constructEvent(rawBody, signature, OLD_SECRET)).toEqual(event);
    expect(stripe.webhooks.constructEvent(rawBody, signature, NEW_SECRET)).toEqual(event);
  });

  it('accepts a Buffer body, as an Express raw-body receiver passes it', () => {
    const headers = signWebhook({ eventId: event.id, rawBody, secrets: [OLD_SECRET] });
    const body = Buffer.from(rawBody);
    expect(stripe.webhooks.constructEvent(body, headers[WEBHOOK_SIGNATURE_HEADER]!, OLD_SECRET)).toEqual(event);
  });

  it('refuses our signature under another secret or over a tampered body (the check is real)', () => {
    const signature = signWebhook({ eventId: event.id, rawBody, secrets: [OLD_SECRET] })[WEBHOOK_SIGNATURE_HEADER]!;
    expect(() => stripe.webhooks.constructEvent(rawBody, signature, NEW_SECRET)).toThrow(
      Stripe.errors.StripeSignatureVerificationError,
    );
    expect(() => stripe.webhooks.constructEvent(`${rawBody} `, signature, OLD_SECRET)).toThrow(
      Stripe.errors.StripeSignatureVerificationError,
    );
  });

  it("refuses a delivery signed outside Stripe's 300 s window, as ours does", () => {
    const old = signWebhook({ eventId: event.id, rawBody, secrets: [OLD_SECRET], timestamp: nowSec() - 301 });
    expect(() => stripe.webhooks.constructEvent(rawBody, old[WEBHOOK_SIGNATURE_HEADER]!, OLD_SECRET)).toThrow(
      /tolerance/i,
    );
  });
});

describe('verifyWebhook', () => {
  it("accepts a signature made by Stripe's test header generator", () => {
    const timestamp = nowSec();
    const signature = stripe.webhooks.generateTestHeaderString({ payload: rawBody, secret: OLD_SECRET, timestamp });
    const headers = {
      [WEBHOOK_ID_HEADER]: event.id,
      [WEBHOOK_TIMESTAMP_HEADER]: String(timestamp),
      [WEBHOOK_SIGNATURE_HEADER]: signature,
    };
    expect(verifyWebhook({ rawBody, headers, secrets: [OLD_SECRET] })).toEqual(event);
  });
});

function nowSec(): number {
  return Math.floor(Date.now() / 1000);
}
