import { builder } from './builder.js';

export const WebhookEndpointStatusEnum = builder.enumType('WebhookEndpointStatus', {
  values: {
    ENABLED: { value: 'ENABLED', description: 'Receives deliveries.' },
    DISABLED: {
      value: 'DISABLED',
      description: 'Receives nothing: events meanwhile are recorded as SKIPPED and not sent when it is enabled again.',
    },
  } as const,
});
