import { builder } from './builder.js';
import { WebhookEndpointOrderingEnum } from './webhook-endpoint-ordering.js';

export const UpdateWebhookEndpointInput = builder.inputType('UpdateWebhookEndpointInput', {
  description: 'The settings to change; a field left out keeps its value.',
  fields: (t) => ({
    ordering: t.field({
      type: WebhookEndpointOrderingEnum,
      description:
        'FIFO orders the deliveries made from now on (those already pending keep no order among themselves); ' +
        'UNORDERED lets every waiting delivery go at once.',
    }),
  }),
});
