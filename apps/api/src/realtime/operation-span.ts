import { isTracing, runInOperation, startRootSpan, tracer } from '@herald/telemetry';
import {
  type Context,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';
import { type DocumentNode, getOperationAST } from 'graphql';

/** The caller's context a span continues (`extensions.traceparent`), for {@link runInSocketOperationSpan}. */
const callerContexts = new WeakMap<Span, Context>();

/**
 * The span of one graphql-ws operation (`subscribe` message), made by hand: the socket server runs
 * operations itself (graphql-ws-adapter.ts), outside any HTTP request span, and a per-message hook in
 * Yoga would not see the `extensions` field the caller puts its trace context in.
 *
 * A W3C `traceparent` (and `tracestate`) in the message's `extensions` makes the span a child of the
 * caller's, as the same header does over HTTP. A query or mutation's span lasts its execution (so a
 * `publishPost` sent over the socket stores this trace with its event); a subscription's lasts until its
 * stream is open (authorization, history lookup), never the subscription's life, and is never made
 * active: its events are traced by the fan-out spans of the operations that publish them.
 *
 * @returns undefined when tracing is off, or when the sampler left out the new trace an operation with no
 *   caller's trace starts (the operation then runs in no context, as an unsampled one does)
 */
export function startSocketOperationSpan(
  extensions: unknown,
  document: DocumentNode,
  operationName: string | null | undefined,
): Span | undefined {
  if (!isTracing()) return undefined;
  const carrier = (extensions ?? {}) as Record<string, unknown>;
  const parent = propagation.extract(ROOT_CONTEXT, carrier, {
    get: (from, key) => (typeof from[key] === 'string' ? (from[key] as string) : undefined),
    keys: (from) => Object.keys(from),
  });
  const operation = getOperationAST(document, operationName);
  const type = operation?.operation ?? 'operation';
  const name = operation?.name?.value ?? operationName ?? '';
  const spanName = name ? `${type} ${name}` : type;
  let span: Span | undefined;
  if (trace.getSpanContext(parent)) {
    span = tracer().startSpan(spanName, { kind: SpanKind.SERVER }, parent);
    callerContexts.set(span, parent);
  } else {
    // No caller's trace: a new one, which the sampler mostly leaves out before any span is made.
    span = startRootSpan(spanName, { kind: SpanKind.SERVER });
    if (!span) return undefined;
  }
  // Attributes only for a span that records (none of this reaches the exporter otherwise).
  if (span.isRecording())
    span.setAttributes({
      'graphql.operation.type': type,
      ...(name ? { 'graphql.operation.name': name } : {}),
      'network.protocol.name': 'websocket',
    });
  return span;
}

/**
 * Runs `work` and ends `span` when it settles (an error marks it). With `active` (queries and mutations)
 * the span is active meanwhile, so its PostgreSQL and Redis calls nest under it and a publish stores its
 * trace. A subscription's `subscribe` is only timed: what it starts lives on (the event stream, its
 * listeners), and it would carry the ended span into every later event's work.
 */
export async function runInSocketOperationSpan<T>(span: Span, active: boolean, work: () => T | Promise<T>): Promise<T> {
  try {
    // A span a sampler that ignores parents left out, with no caller's trace, runs in no context
    // (runInOperation); under a parent-based one such an operation has no span (startSocketOperationSpan).
    return await (active ? runInOperation(callerContexts.get(span) ?? ROOT_CONTEXT, span, work) : work());
  } catch (error) {
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw error;
  } finally {
    span.end();
  }
}
