import { builder } from './builder.js';

export const WebhookDeliveryStatusEnum = builder.enumType('WebhookDeliveryStatus', {
  values: {
    PENDING: {
      value: 'PENDING',
      description:
        'Not delivered yet; an attempt is due at `nextAttemptAt` (on a FIFO endpoint, once it heads the line).',
    },
    SUCCEEDED: { value: 'SUCCEEDED', description: 'The receiver answered 2xx.' },
    DEAD: { value: 'DEAD', description: 'Retries ran out (WEBHOOK_RETRY_HORIZON); parked as a dead letter.' },
    SKIPPED: { value: 'SKIPPED', description: 'Recorded while the endpoint was disabled; never sent.' },
  } as const,
});
