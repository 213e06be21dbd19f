import { createWebhookAttemptsLoader, type WebhookAttemptsLoader, type WebhookDelivery } from '@herald/db';
import type { Context } from '../context.js';
import { builder } from './builder.js';
import { WebhookAttemptRef } from './webhook-attempt.js';
import { WebhookDeliveryStatusEnum } from './webhook-delivery-status.js';

export const WebhookDeliveryRef = builder.objectRef<WebhookDelivery>('WebhookDelivery').implement({
  description: 'One event sent to one endpoint, with every attempt.',
  fields: (t) => ({
    id: t.exposeID('id'),
    eventId: t.exposeID('event_id'),
    eventType: t.exposeString('event_type'),
    endpointId: t.exposeID('endpoint_id'),
    status: t.field({ type: WebhookDeliveryStatusEnum, resolve: (delivery) => delivery.status }),
    attempts: t.field({
      type: [WebhookAttemptRef],
      description: 'Oldest first.',
      resolve: (delivery, _args, context) => attemptsLoader(context).load(delivery.id),
    }),
    nextAttemptAt: t.field({
      type: 'DateTime',
      nullable: true,
      description:
        "When the next attempt is due; null once SUCCEEDED or DEAD, and while waiting in a FIFO endpoint's line.",
      resolve: (delivery) => (delivery.status === 'PENDING' ? delivery.next_attempt_at : null),
    }),
    createdAt: t.field({ type: 'DateTime', resolve: (delivery) => delivery.created_at }),
  }),
});

export const WebhookDeliveryConnection = builder.connectionObject(
  { type: WebhookDeliveryRef, name: 'WebhookDeliveryConnection' },
  { name: 'WebhookDeliveryEdge' },
);

/** One attempts loader per request (the context object), so no cached attempt outlives it. */
const attemptsLoaders = new WeakMap<Context, WebhookAttemptsLoader>();

function attemptsLoader(context: Context): WebhookAttemptsLoader {
  let loader = attemptsLoaders.get(context);
  if (!loader) {
    loader = createWebhookAttemptsLoader(context.db);
    attemptsLoaders.set(context, loader);
  }
  return loader;
}
