import type { WebhookEndpoint } from '@herald/db';
import { builder } from './builder.js';
import { WebhookEndpointRef } from './webhook-endpoint.js';
import { type SignatureScheme, WebhookSignatureSchemeEnum } from './webhook-signature-scheme.js';

/** What the mutations that issue a signing secret return (here and in rotate-webhook-secret-payload.ts). */
export interface SecretPayload {
  endpoint: WebhookEndpoint;
  secret: string;
  signatureScheme: SignatureScheme;
}

export const CreateWebhookEndpointPayload = builder.objectRef<SecretPayload>('CreateWebhookEndpointPayload').implement({
  fields: (t) => ({
    endpoint: t.field({ type: WebhookEndpointRef, resolve: (payload) => payload.endpoint }),
    secret: t.exposeString('secret', {
      description:
        'What the receiver verifies with: the signing secret (`whsec_…`), or for ED25519 the public key (`whpk_…`). ' +
        'Shown only here: store it now.',
    }),
    signatureScheme: t.field({ type: WebhookSignatureSchemeEnum, resolve: (payload) => payload.signatureScheme }),
  }),
});
