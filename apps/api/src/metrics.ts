import { registerLiveHeapMetric } from '@herald/config/live-heap-metric';
import { webhookEventsInvalidCounter } from '@herald/webhook-engine';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

/**
 * The API's Prometheus metrics, served on `/metrics`. No label carries an organisation or user id:
 * tenants are unbounded, and every label value is a new time series.
 */
export interface ApiMetrics {
  registry: Registry;
  openSockets: Gauge;
  activeSubscriptions: Gauge;
  eventsPublished: Counter;
  eventsDelivered: Counter;
  deliveryErrors: Counter<'reason'>;
  eventToSendSeconds: Histogram;
  slowConsumersClosed: Counter;
  /** Events sent from the history to subscriptions resuming with `after` (docs/subscriptions.md). */
  eventsReplayed: Counter;
  /** Shared-execution groups live now: each executes an event once for all its subscribers. */
  subscriptionGroups: Gauge;
  /**
   * HTTP requests by how they were answered (http-fast-path.ts): `compiled` (fast path, an accepted
   * query run compiled), `pipeline` (fast path through Yoga's GraphQL pipeline), `yoga` (Yoga's HTTP
   * layer: every other request, GET, other paths, other content types, probes included).
   */
  httpRequests: Counter<'route'>;
  /**
   * Refusals by tenant quota (`quota`: operationsPerSecond, publishesPerSecond, socketsPerUser,
   * subscriptions). No organisation label: `organizationUsage` names the organisations.
   */
  tenantRefusals: Counter<'quota'>;
  /** Quota checks answered by this pod's local share because Redis failed them. */
  tenantQuotaFallbacks: Counter;
  /**
   * HTTP operations that waited for a turn because their tenant already ran its share at once on this
   * pod (`TENANT_CONCURRENT_OPERATIONS_PER_POD`).
   */
  tenantOperationsWaited: Counter;
  /**
   * Webhook events not recorded because their body did not match the event catalog's schema (a bug in
   * the code that built it), by event type: `herald_webhook_events_invalid_total{type}`.
   */
  webhookEventsInvalid: Counter<'type'>;
  /**
   * 1 when a fast path that reaches past a dependency's public API is off because the dependency's
   * internals are not what it was written for (`path`: ws_frames, pglite_statements); 0 otherwise.
   * See docs/development.md, "Upgrading dependencies".
   */
  fastPathFallback: Gauge<'path'>;
}

/** The `path` label values of `herald_fast_path_fallback`. */
export const FAST_PATHS = [
  'ws_frames',
  'pglite_statements',
  'tracing_context_storage',
  'tracing_instrumentation_gate',
  'tracing_pg_pool_listeners',
] as const;

/** The `reason` label values of `herald_delivery_errors_total`. */
export const DELIVERY_ERROR_REASONS = ['publish_failed', 'send_failed'] as const;

/** One registry per server instance, so tests and several servers in one process don't collide. */
export function createApiMetrics(): ApiMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'herald_api_' });
  registerLiveHeapMetric(registry, 'herald_api_');
  const deliveryErrors = new Counter({
    name: 'herald_delivery_errors_total',
    help: 'Events that could not be sent to a subscriber, or could not be published',
    labelNames: ['reason'],
    registers: [registry],
  });
  // Every reason exists from the start at 0: the dashboard shows 0 rather than no data, and rate() sees
  // the first error (a series born at 1 has no earlier sample to grow from).
  for (const reason of DELIVERY_ERROR_REASONS) deliveryErrors.inc({ reason }, 0);
  // The same series as the dispatcher's (embedded mode registers both here): one definition.
  const webhookEventsInvalid = webhookEventsInvalidCounter(registry);
  const fastPathFallback = new Gauge({
    name: 'herald_fast_path_fallback',
    help: "1 when a fast path is off because a dependency's internals changed (path: ws_frames, pglite_statements, tracing_context_storage, tracing_instrumentation_gate, tracing_pg_pool_listeners)",
    labelNames: ['path'],
    registers: [registry],
  });
  for (const path of FAST_PATHS) fastPathFallback.set({ path }, 0);
  return {
    registry,
    openSockets: new Gauge({
      name: 'herald_ws_open_sockets',
      help: 'WebSocket connections currently open',
      registers: [registry],
    }),
    activeSubscriptions: new Gauge({
      name: 'herald_subscriptions_active',
      help: 'GraphQL subscriptions currently streaming',
      registers: [registry],
    }),
    eventsPublished: new Counter({
      name: 'herald_events_published_total',
      help: 'Events this pod published to pub/sub',
      registers: [registry],
    }),
    eventsDelivered: new Counter({
      name: 'herald_events_delivered_total',
      help: 'next messages sent to subscribers',
      registers: [registry],
    }),
    deliveryErrors,
    eventToSendSeconds: new Histogram({
      name: 'herald_event_to_send_seconds',
      help: 'Time from publishing an event to sending it on a socket',
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    slowConsumersClosed: new Counter({
      name: 'herald_ws_slow_consumers_closed_total',
      help: 'Sockets closed because their send buffer passed the limit when an event was due',
      registers: [registry],
    }),
    eventsReplayed: new Counter({
      name: 'herald_subscription_events_replayed_total',
      help: 'Events sent from the history to subscriptions resuming after a cursor',
      registers: [registry],
    }),
    subscriptionGroups: new Gauge({
      name: 'herald_subscription_groups_active',
      help: 'Shared-execution subscription groups live now (same document and variables, executed once per event)',
      registers: [registry],
    }),
    httpRequests: new Counter({
      name: 'herald_http_requests_total',
      help: 'HTTP requests by route: compiled (fast path, compiled query), pipeline (fast path, Yoga GraphQL pipeline), yoga (Yoga HTTP layer)',
      labelNames: ['route'],
      registers: [registry],
    }),
    tenantRefusals: new Counter({
      name: 'herald_tenant_refusals_total',
      help: 'Operations, publishes, sockets and subscriptions refused by a tenant quota, by quota',
      labelNames: ['quota'],
      registers: [registry],
    }),
    tenantQuotaFallbacks: new Counter({
      name: 'herald_tenant_quota_fallbacks_total',
      help: "Tenant quota checks answered by this pod's local share because Redis failed them",
      registers: [registry],
    }),
    tenantOperationsWaited: new Counter({
      name: 'herald_tenant_operations_waited_total',
      help: "HTTP operations that waited their turn behind their own tenant's operations running on this pod",
      registers: [registry],
    }),
    webhookEventsInvalid,
    fastPathFallback,
  };
}
