import { contextFromTraceparent, isTracing, tracer, unsampledParent } from '@herald/telemetry';
import { type Span, SpanKind } from '@opentelemetry/api';

/**
 * The span of one event's fan-out to one subscriber group on this pod, in the trace of the operation
 * that published the event (its `traceparent` travels in the event through the history and the live
 * channel). Made by hand in subscription-broadcast.ts: the group executes once and writes one frame per
 * member straight to the sockets, so there is no library call to instrument, and a span per socket
 * would cost more than the write it measures. A pod with several groups for the same event (different
 * documents or variables) records one span for each, as siblings under the publishing span.
 *
 * Subscriptions outside a group (the stock per-subscription path) and catch-up replays get no span, nor
 * does an event whose publishing operation was not sampled (`unsampledParent`: no span under it would
 * record, so the SDK is not asked for one).
 */
export function startFanOutSpan(traceparent: string, members: number): Span | undefined {
  if (!isTracing() || unsampledParent(traceparent)) return undefined;
  const span = tracer().startSpan(
    'subscription fan-out',
    { kind: SpanKind.CONSUMER },
    contextFromTraceparent(traceparent),
  );
  if (span.isRecording()) span.setAttribute('herald.subscription.members', members);
  return span;
}

/** Records what the fan-out wrote: frames sent (skipped, closed and too-slow members are not), payload bytes. */
export function endFanOutSpan(span: Span, sent: number, payloadBytes: number): void {
  span.setAttribute('herald.subscription.frames_sent', sent);
  span.setAttribute('herald.subscription.payload_bytes', payloadBytes);
  span.end();
}
