import { builder } from './builder.js';

export const WebhookEndpointOrderingEnum = builder.enumType('WebhookEndpointOrdering', {
  description: 'In what order an endpoint gets its deliveries.',
  values: {
    UNORDERED: {
      value: 'UNORDERED',
      description: 'Several deliveries at once, each retried on its own schedule: the fastest.',
    },
    FIFO: {
      value: 'FIFO',
      description:
        "Strictly in the order the organisation's events were committed, one at a time: a delivery is attempted only " +
        'once the one before it succeeded or went DEAD, so a failing delivery holds back those after it.',
    },
  } as const,
});
