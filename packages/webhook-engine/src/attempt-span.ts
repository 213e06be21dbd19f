import {
  contextFromTraceparent,
  formatTraceparent,
  isTracing,
  tracer,
  unsampledChildTraceparent,
} from '@herald/telemetry';
import { type Span, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import type { DeliveryOutcome } from './deliver.js';
import type { ClaimedDelivery } from './lease-protocol.js';
import { redactUrl } from './url-policy.js';

/** The W3C trace context header every webhook POST carries while tracing is on. */
export const TRACEPARENT_HEADER = 'traceparent';

/**
 * One webhook attempt as a CLIENT span, a child of the operation that published the event (the
 * `traceparent` stored with its outbox row, read by the claim). The POST itself carries this span's
 * `traceparent`, so a receiver that traces continues the same trace. Made by hand: undici's
 * instrumentation would add its own span per request and put that one in the header instead.
 *
 * An event published with tracing off (no stored context) still gets a span when this process traces:
 * it starts a trace of its own. Attributes: the receiver's status (`http.response.status_code`), the
 * attempt's duration as measured by the deliverer, its number (1 for the first), and the endpoint,
 * delivery and event ids. A non-2xx answer or no answer marks the span as an error.
 *
 * An event whose publishing operation was not sampled (99 % of them at a ratio of 0.01) gets no span: its
 * POST carries a `traceparent` of the same trace with a new span id and the not-sampled flag, as the SDK's
 * non-recording span would have, without asking the SDK (`unsampledChildTraceparent`).
 *
 * @returns undefined when tracing is off: the attempt then pays one boolean read.
 */
export function startAttemptSpan(
  delivery: ClaimedDelivery,
): { span: Span | undefined; traceparent: string | null } | undefined {
  if (!isTracing()) return undefined;
  const unsampled = unsampledChildTraceparent(delivery.traceparent);
  if (unsampled) return { span: undefined, traceparent: unsampled };
  const span = tracer().startSpan(
    'webhook attempt',
    { kind: SpanKind.CLIENT },
    contextFromTraceparent(delivery.traceparent),
  );
  // Attributes only for a span that records: an unsampled attempt parses no URL.
  if (span.isRecording())
    span.setAttributes({
      'http.request.method': 'POST',
      'url.full': redactUrl(delivery.url),
      'herald.webhook.attempt': delivery.attemptCount + 1,
      'herald.webhook.endpoint_id': delivery.endpointId,
      'herald.webhook.delivery_id': delivery.id,
      'herald.webhook.event_id': delivery.eventId,
      'herald.webhook.event_type': delivery.eventType,
    });
  return { span, traceparent: formatTraceparent(span.spanContext()) };
}

/** Records the attempt's outcome on its span and ends it. */
export function endAttemptSpan(span: Span, outcome: DeliveryOutcome): void {
  if (outcome.statusCode !== null) span.setAttribute('http.response.status_code', outcome.statusCode);
  span.setAttribute('herald.webhook.duration_ms', outcome.durationMs);
  if (!outcome.ok) span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.error ?? undefined });
  span.end();
}
