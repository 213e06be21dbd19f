import { builder } from './builder.js';

export type SignatureScheme = 'HMAC_SHA256' | 'ED25519';

export const WebhookSignatureSchemeEnum = builder.enumType('WebhookSignatureScheme', {
  description: 'How deliveries to an endpoint are signed.',
  values: {
    HMAC_SHA256: {
      value: 'HMAC_SHA256',
      description:
        "A shared `whsec_…` secret: `X-Webhook-Signature` (Stripe's scheme) and `webhook-signature: v1,…` (Standard Webhooks).",
    },
    ED25519: {
      value: 'ED25519',
      description:
        'Asymmetric Standard Webhooks `webhook-signature: v1a,…`: Herald keeps the signing key, the receiver verifies with the `whpk_…` public key. No `X-Webhook-Signature`.',
    },
  } as const,
});
