import type { WebhookAttempt } from '@herald/db';
import { builder } from './builder.js';

export const WebhookAttemptRef = builder.objectRef<WebhookAttempt>('WebhookAttempt').implement({
  description: 'One HTTP attempt of a delivery.',
  fields: (t) => ({
    at: t.field({ type: 'DateTime', resolve: (attempt) => attempt.at }),
    statusCode: t.exposeInt('status_code', {
      nullable: true,
      description: 'The HTTP status; null when no response arrived (timeout, connection error, refused address).',
    }),
    durationMs: t.exposeInt('duration_ms'),
    error: t.exposeString('error', { nullable: true, description: 'Why the attempt failed; null on success.' }),
    responseBody: t.exposeString('response_body', {
      nullable: true,
      description: "The first bytes (at most 1 KiB, as UTF-8 text) of the receiver's answer; null when none arrived.",
    }),
  }),
});
