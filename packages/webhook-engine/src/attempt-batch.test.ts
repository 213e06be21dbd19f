import { InvalidWebhookEventError } from '@herald/db';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { reportInvalidEvents } from './attempt-batch.js';
import { createDispatcherMetrics, webhookEventsInvalidCounter } from './metrics.js';

describe('reportInvalidEvents', () => {
  it('logs each refused operational event at error with what is wrong, and counts it by type in the series the API shares', async () => {
    const registry = new Registry();
    const metrics = createDispatcherMetrics({ retryBacklog: async () => 0, streamLag: async () => 0 }, registry);
    // Embedded mode: the API asks for the same series in the same registry, and gets the same counter.
    expect(webhookEventsInvalidCounter(registry)).toBe(metrics.eventsInvalid);
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });

    reportInvalidEvents(logger, metrics, [
      new InvalidWebhookEventError('evt_1', 'webhook.delivery.dead', [
        '/data/attempts: Expected integer to be greater or equal to 1',
      ]),
    ]);

    expect(lines).toEqual([
      expect.objectContaining({
        level: 50,
        eventId: 'evt_1',
        eventType: 'webhook.delivery.dead',
        problems: ['/data/attempts: Expected integer to be greater or equal to 1'],
        msg: 'webhook event does not match its schema: not recorded',
      }),
    ]);
    const text = await registry.metrics();
    expect(text).toContain('herald_webhook_events_invalid_total{type="webhook.delivery.dead"} 1');
    expect(text).toContain('herald_webhook_events_invalid_total{type="webhook.endpoint.disabled"} 0');
  });
});
