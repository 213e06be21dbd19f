import { WEBHOOK_EVENT_TYPES } from '@herald/contracts';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/**
 * The dispatcher's Prometheus metrics. No label carries an organisation, endpoint or URL: those are
 * unbounded, and every label value is a new time series (the logs carry them instead).
 */
export interface DispatcherMetrics {
  registry: Registry;
  /** `herald_webhook_attempts_total{outcome="success|failure"}`. */
  attempts: Counter<'outcome'>;
  /** `herald_webhook_delivery_seconds{outcome}`: duration of one attempt (the HTTP round trip). */
  deliverySeconds: Histogram<'outcome'>;
  /** `herald_webhook_dead_letters_total`: deliveries that ran out of retries. */
  deadLetters: Counter;
  /** `herald_webhook_endpoints_disabled_total`: endpoints this dispatcher disabled (410, failing too long). */
  disabledEndpoints: Counter;
  /**
   * `herald_webhook_throttled_total{reason="endpoint_rate|org_in_flight"}`: times a lane was held back
   * with a delivery it could otherwise have started (an endpoint's rate limit; its organisation's
   * attempts in flight, across all dispatchers). The delivery waits; nothing is failed.
   */
  throttled: Counter<'reason'>;
  /**
   * `herald_webhook_statement_turn_waits_total`: lane statements (claims, records) that waited for a
   * database turn (statement-turns.ts): an organisation's lanes held their share of the pool, or all the
   * lanes together did.
   */
  statementTurnWaits: Counter;
  /**
   * `herald_webhook_events_invalid_total{type}`: operational events the record did not write because
   * their body did not match the event catalog (a bug). The API counts its own refusals in the same
   * series; in embedded mode both share the one registered in the API's registry.
   */
  eventsInvalid: Counter<'type'>;
}

const EVENTS_INVALID = 'herald_webhook_events_invalid_total';

/** The counter of refused event bodies: the one already in `registry` (the API's, in embedded mode), or a new one. */
export function webhookEventsInvalidCounter(registry: Registry): Counter<'type'> {
  const registered = registry.getSingleMetric(EVENTS_INVALID);
  if (registered) return registered as Counter<'type'>;
  const counter = new Counter({
    name: EVENTS_INVALID,
    help: 'Webhook events not recorded because their body did not match the event catalog (a bug), by type',
    labelNames: ['type'] as const,
    registers: [registry],
  });
  // Every type exists from start-up at 0, so rate() sees the first one.
  for (const type of WEBHOOK_EVENT_TYPES) counter.inc({ type }, 0);
  return counter;
}

export interface MetricSources {
  /** Deliveries waiting for a retry, read at scrape time (`herald_webhook_retry_backlog`). */
  retryBacklog(): Promise<number>;
  /** Queue entries not yet read by any dispatcher, read at scrape time (`herald_webhook_stream_lag`). */
  streamLag(): Promise<number>;
  /** DEAD deliveries now (`herald_webhook_dead_deliveries`). */
  deadDeliveries?(): Promise<number>;
  /** DISABLED endpoints now (`herald_webhook_disabled_endpoints`). */
  disabledEndpoints?(): Promise<number>;
  /** Age in seconds of the oldest outbox event not yet fanned out (`herald_webhook_outbox_lag_seconds`). */
  outboxLagSeconds?(): Promise<number>;
}

/**
 * Creates the metrics in `registry` (a fresh one by default: several dispatchers in one process, as in
 * tests or embedded mode inside the API, must not collide). Gauges are read from `sources` when
 * scraped; a failing source leaves the last value.
 */
export function createDispatcherMetrics(
  sources: MetricSources,
  registry: Registry = new Registry(),
): DispatcherMetrics {
  const attempts = new Counter({
    name: 'herald_webhook_attempts_total',
    help: 'Webhook delivery attempts, by outcome (success: 2xx; failure: anything else)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  // Both series exist from the start, so a failure ratio is defined before the first failure.
  attempts.inc({ outcome: 'success' }, 0);
  attempts.inc({ outcome: 'failure' }, 0);
  new Gauge({
    name: 'herald_webhook_retry_backlog',
    help: 'Webhook deliveries waiting for a retry',
    registers: [registry],
    async collect() {
      const value = await sources.retryBacklog().catch(() => undefined);
      if (value !== undefined) this.set(value);
    },
  });
  new Gauge({
    name: 'herald_webhook_stream_lag',
    help: 'Webhook work entries appended to the queue and not yet read by any dispatcher',
    registers: [registry],
    async collect() {
      const value = await sources.streamLag().catch(() => undefined);
      if (value !== undefined) this.set(value);
    },
  });
  for (const [name, help, source] of [
    [
      'herald_webhook_dead_deliveries',
      'Webhook deliveries that are DEAD now (listed and replayed by the dlq CLI)',
      sources.deadDeliveries,
    ],
    ['herald_webhook_disabled_endpoints', 'Webhook endpoints that are DISABLED now', sources.disabledEndpoints],
    [
      'herald_webhook_outbox_lag_seconds',
      'Age of the oldest outbox event not yet turned into deliveries (0 when none waits)',
      sources.outboxLagSeconds,
    ],
  ] as const) {
    if (!source) continue;
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        const value = await source().catch(() => undefined);
        if (value !== undefined) this.set(value);
      },
    });
  }
  const throttled = new Counter({
    name: 'herald_webhook_throttled_total',
    help: 'Times a webhook attempt was held back by a throttle (it waits, never fails), by reason',
    labelNames: ['reason'] as const,
    registers: [registry],
  });
  throttled.inc({ reason: 'endpoint_rate' }, 0);
  throttled.inc({ reason: 'org_in_flight' }, 0);
  return {
    registry,
    attempts,
    throttled,
    eventsInvalid: webhookEventsInvalidCounter(registry),
    statementTurnWaits: new Counter({
      name: 'herald_webhook_statement_turn_waits_total',
      help: 'Webhook lane statements (claims, records) that waited for a database turn: one organisation held its share of the pool, or all lanes together did',
      registers: [registry],
    }),
    deliverySeconds: new Histogram({
      name: 'herald_webhook_delivery_seconds',
      help: 'Duration of one webhook delivery attempt (the HTTP round trip), by outcome',
      labelNames: ['outcome'] as const,
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    }),
    deadLetters: new Counter({
      name: 'herald_webhook_dead_letters_total',
      help: 'Webhook deliveries that ran out of retries and were parked in the dead-letter stream',
      registers: [registry],
    }),
    disabledEndpoints: new Counter({
      name: 'herald_webhook_endpoints_disabled_total',
      help: 'Webhook endpoints disabled by the dispatcher (410 Gone, or every attempt failing for WEBHOOK_DISABLE_AFTER)',
      registers: [registry],
    }),
  };
}
