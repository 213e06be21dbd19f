import { WEBHOOK_DELIVERY_ID_PREFIX, WEBHOOK_EVENT_ID_PREFIX } from './webhooks.js';

// Ids Herald makes in code: a prefix naming what the id is, then the 32 hex digits of a random UUID.
// (The dispatcher's lease protocol makes the same shape in SQL for the events it writes itself.)

/** A fresh event id, `evt_` and 32 hex digits: the outbox row's id, the body's `id`, `X-Webhook-ID`. */
export function newEventId(): string {
  return `${WEBHOOK_EVENT_ID_PREFIX}${crypto.randomUUID().replaceAll('-', '')}`;
}

/** A fresh delivery id, `del_` and 32 hex digits. */
export function newDeliveryId(): string {
  return `${WEBHOOK_DELIVERY_ID_PREFIX}${crypto.randomUUID().replaceAll('-', '')}`;
}
