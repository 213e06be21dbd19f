import { InvalidWebhookEventError } from '@herald/db';
import { TEST_KEYRING } from '@herald/testing';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createBatchAttempter, reportInvalidEvents } from './attempt-batch.js';
import { createDeliverer } from './deliver.js';
import { claimDeliveries, fanOutOutbox } from './lease-protocol.js';
import { createDispatcherMetrics, webhookEventsInvalidCounter } from './metrics.js';
import { createSecretCache } from './secret-cache.js';
import { createDispatcherHarness, type DispatcherHarness } from './testing/harness.js';
import { attemptOutcome } from './testing/outcomes.js';

/** A logger whose lines land in `lines`, parsed. */
function capturingLogger() {
  const lines: Array<Record<string, unknown>> = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
  return { lines, logger };
}

describe('reportInvalidEvents', () => {
  it('logs each refused operational event at error with what is wrong, and counts it by type in the series the API shares', async () => {
    const registry = new Registry();
    const metrics = createDispatcherMetrics({ retryBacklog: async () => 0, streamLag: async () => 0 }, registry);
    // Embedded mode: the API asks for the same series in the same registry, and gets the same counter.
    expect(webhookEventsInvalidCounter(registry)).toBe(metrics.eventsInvalid);
    const { lines, logger } = capturingLogger();

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

describe("the batch attempter's record", () => {
  let harness: DispatcherHarness;

  beforeAll(async () => {
    harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  });

  afterAll(() => harness?.close());

  it('reports an operational event the catalog refused: logged at error, counted, and the endpoint disabled without it', async () => {
    const endpoint = await harness.createEndpoint('org-refused-report', 'http://127.0.0.1:9/refused');
    await harness.publish('org-refused-report');
    const { queued } = await fanOutOutbox(harness.db, { limit: 100, queueLeaseMs: 60_000 });
    const [delivery] = await claimDeliveries(harness.db, { queued, endpointCap: 10, leaseMs: 60_000 });
    const registry = new Registry();
    const metrics = createDispatcherMetrics({ retryBacklog: async () => 0, streamLag: async () => 0 }, registry);
    const { lines, logger } = capturingLogger();
    const attempter = createBatchAttempter({
      db: harness.db,
      queue: harness.newQueue(),
      deliverer: createDeliverer({ timeoutMs: 1_000, policy: { allowPrivateUrls: true } }),
      metrics,
      logger,
      retry: { baseMs: 1_000, horizonMs: 60_000 },
      secrets: createSecretCache({ keyring: TEST_KEYRING }),
      attemptLeaseMs: 60_000,
      endpointCap: 10,
      disableAfterMs: 86_400_000,
    });

    // A 410 whose outcome lacks its URL (a bug no real attempt has): the disable's body misses `url`.
    const outcome = attemptOutcome(delivery!, {
      url: undefined as unknown as string,
      statusCode: 410,
      error: 'HTTP 410',
      health: 'gone',
      next: { status: 'PENDING', retryInMs: 60_000 },
    });
    const { result, settled } = await attempter.record([{ delivery: delivery!, outcome }], undefined);
    await settled;

    expect(result.disabled).toEqual([{ endpointId: endpoint.id, reason: 'the receiver answered 410 Gone' }]);
    expect(result.events).toBe(0);
    expect(lines.filter((line) => line.msg === 'webhook event does not match its schema: not recorded')).toEqual([
      expect.objectContaining({ level: 50, eventType: 'webhook.endpoint.disabled' }),
    ]);
    expect(await registry.metrics()).toContain(
      'herald_webhook_events_invalid_total{type="webhook.endpoint.disabled"} 1',
    );
    const events = await harness.db
      .selectFrom('webhook_outbox')
      .select('type')
      .where('exclude_endpoint_id', '=', endpoint.id)
      .execute();
    expect(events).toEqual([]);
  });
});
