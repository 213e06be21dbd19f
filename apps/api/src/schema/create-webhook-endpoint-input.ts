import { WEBHOOK_EVENT_TYPES } from '@herald/contracts';
import { builder } from './builder.js';
import { WebhookEndpointOrderingEnum } from './webhook-endpoint-ordering.js';
import { FILTER_INPUT_DESCRIPTION } from './webhook-event-input.js';
import { WebhookSignatureSchemeEnum } from './webhook-signature-scheme.js';

/** Highest `rateLimitPerSecond` accepted: far above what one receiver takes, low enough to stay meaningful. */
export const MAX_RATE_LIMIT_PER_SECOND = 10_000;

export const CreateWebhookEndpointInput = builder.inputType('CreateWebhookEndpointInput', {
  fields: (t) => ({
    orgId: t.id({ required: true }),
    url: t.string({
      required: true,
      description: 'http(s) URL; link-local, and unless allowed, loopback and private addresses are refused.',
    }),
    eventTypes: t.stringList({ required: true, description: `Any of: ${WEBHOOK_EVENT_TYPES.join(', ')}.` }),
    signatureScheme: t.field({
      type: WebhookSignatureSchemeEnum,
      description: 'How deliveries are signed. @default HMAC_SHA256',
    }),
    filter: t.string({ description: FILTER_INPUT_DESCRIPTION }),
    rateLimitPerSecond: t.int({
      description: `Attempts per second at most, 1 to ${MAX_RATE_LIMIT_PER_SECOND}. @default null (no limit)`,
    }),
    ordering: t.field({
      type: WebhookEndpointOrderingEnum,
      description: 'In what order deliveries are made. @default UNORDERED',
    }),
  }),
});
