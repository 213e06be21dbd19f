import { InvalidWebhookEventError } from '@herald/db';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { Context } from '../context.js';
import { createApiMetrics } from '../metrics.js';
import { reportInvalidWebhookEvent } from './webhook-event-input.js';

// An event body the catalog refused is reported once: an error line saying what is wrong, and one
// more in herald_webhook_events_invalid_total for its type (webhook-event-invalid.test.ts drives it
// through the mutations).

describe('reportInvalidWebhookEvent', () => {
  it('logs at error with the event and its problems, and counts it by type', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const metrics = createApiMetrics();
    const error = new InvalidWebhookEventError('evt_1', 'webhook.test', ['/data/endpointId: Expected string']);

    reportInvalidWebhookEvent({ log, metrics } as unknown as Context, error);

    expect(lines).toEqual([
      expect.objectContaining({
        level: 50,
        eventId: 'evt_1',
        eventType: 'webhook.test',
        problems: ['/data/endpointId: Expected string'],
        msg: 'webhook event does not match its schema: not recorded',
      }),
    ]);
    const exposition = await metrics.registry.metrics();
    expect(exposition).toContain('herald_webhook_events_invalid_total{type="webhook.test"} 1');
    expect(exposition).toContain('herald_webhook_events_invalid_total{type="post.published"} 0');
  });
});
