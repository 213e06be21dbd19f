import { WEBHOOK_DELIVERY_ID_PREFIX, WEBHOOK_EVENT_ID_PREFIX } from './webhooks.js';

// Ids Herald makes: a prefix naming what the id is, then the 32 hex digits of a random UUID. Every
// event id comes from newEventId, those of the events the dispatcher records included (passed to its
// statement); the fan-out makes delivery ids of the same shape in SQL, one per row it inserts.

/** A fresh event id, `evt_` and 32 hex digits: the outbox row's id, the body's `id`, `X-Webhook-ID`. */
export function newEventId(): string {
  return `${WEBHOOK_EVENT_ID_PREFIX}${crypto.randomUUID().replaceAll('-', '')}`;
}

/** A fresh delivery id, `del_` and 32 hex digits. */
export function newDeliveryId(): string {
  return `${WEBHOOK_DELIVERY_ID_PREFIX}${crypto.randomUUID().replaceAll('-', '')}`;
}
