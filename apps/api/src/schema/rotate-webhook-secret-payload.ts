import { builder } from './builder.js';
import type { SecretPayload } from './create-webhook-endpoint-payload.js';
import { WebhookEndpointRef } from './webhook-endpoint.js';
import { WebhookSignatureSchemeEnum } from './webhook-signature-scheme.js';

export const RotateWebhookSecretPayload = builder.objectRef<SecretPayload>('RotateWebhookSecretPayload').implement({
  fields: (t) => ({
    endpoint: t.field({ type: WebhookEndpointRef, resolve: (payload) => payload.endpoint }),
    secret: t.exposeString('secret', {
      description:
        'The new signing secret (`whsec_…`), or for ED25519 the new public key (`whpk_…`). Shown only here: store it now.',
    }),
    signatureScheme: t.field({ type: WebhookSignatureSchemeEnum, resolve: (payload) => payload.signatureScheme }),
  }),
});
