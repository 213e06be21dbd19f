import { contextWithSpan, isTracing, tracer } from '@herald/telemetry';
import { context, propagation, ROOT_CONTEXT, type Span, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { type DocumentNode, getOperationAST } from 'graphql';

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
 * @returns undefined when tracing is off (nothing else is done then).
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
  return tracer().startSpan(
    name ? `${type} ${name}` : type,
    {
      kind: SpanKind.SERVER,
      attributes: {
        'graphql.operation.type': type,
        ...(name ? { 'graphql.operation.name': name } : {}),
        'network.protocol.name': 'websocket',
      },
    },
    parent,
  );
}

/**
 * Runs `work` and ends `span` when it settles (an error marks it). With `active` (queries and mutations)
 * the span is active meanwhile, so its PostgreSQL and Redis calls nest under it and a publish stores its
 * trace. A subscription's `subscribe` is only timed: what it starts lives on (the event stream, its
 * listeners), and it would carry the ended span into every later event's work.
 */
export async function runInSocketOperationSpan<T>(span: Span, active: boolean, work: () => T | Promise<T>): Promise<T> {
  try {
    return await (active ? context.with(contextWithSpan(ROOT_CONTEXT, span), work) : work());
  } catch (error) {
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw error;
  } finally {
    span.end();
  }
}
