import type { WebhookFifoHead } from '@herald/db';
import { builder } from './builder.js';
import { WebhookDeliveryRef } from './webhook-delivery.js';

export const WebhookFifoHeadRef = builder.objectRef<WebhookFifoHead>('WebhookFifoHead').implement({
  description: "The head of a FIFO endpoint's line: the delivery every later one waits for.",
  fields: (t) => ({
    delivery: t.field({ type: WebhookDeliveryRef, resolve: (head) => head.delivery }),
    heldBack: t.exposeInt('heldBack', { description: 'Pending deliveries of the endpoint waiting behind it.' }),
  }),
});
