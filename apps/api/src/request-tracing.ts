import type { RequestListener, Server } from 'node:http';
import { contextWithSpan, isTracing, tracer } from '@herald/telemetry';
import { context, propagation, ROOT_CONTEXT, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { type DocumentNode, getOperationAST } from 'graphql';

/**
 * The GraphQL operation span of an HTTP request, made by hand: no HTTP server instrumentation is loaded.
 * The HTTP fast path (http-fast-path.ts) answers most requests without Yoga's fetch pipeline, so a Yoga
 * or envelop tracing plugin would never see them, and node:http's instrumentation costs every request
 * (every path, headers copied into attributes) what this does only for `/graphql`.
 *
 * One SERVER span per request to `path`, a child of the caller's span when the request carries a W3C
 * `traceparent` (and `tracestate`), started before the body is read and ended when the response closes.
 * It is named `POST /graphql` until the operation is known, then `<type> <operation name>` (`mutation
 * Publish`) by {@link nameOperationSpan}. The PostgreSQL and Redis calls of the request, and the
 * trace context `publishPost` stores with its event, are under it.
 *
 * With tracing off nothing changes: the server keeps its listener, not even a wrapper call per request.
 * With tracing on, the server's `request` listener is replaced by one that makes the span and calls it.
 */
export function traceGraphQLRequests(server: Server, path: string): void {
  if (!isTracing()) return;
  for (const listener of server.listeners('request') as RequestListener[]) {
    server.removeListener('request', listener);
    server.on('request', tracedListener(listener, path));
  }
}

function tracedListener(listener: RequestListener, path: string): RequestListener {
  return (req, res) => {
    const url = req.url ?? '';
    if (url !== path && !url.startsWith(`${path}?`)) return listener(req, res);
    const parent = propagation.extract(ROOT_CONTEXT, req.headers);
    const span = tracer().startSpan(
      `${req.method} ${path}`,
      { kind: SpanKind.SERVER, attributes: { 'http.request.method': req.method ?? '', 'url.path': path } },
      parent,
    );
    res.once('close', () => {
      span.setAttribute('http.response.status_code', res.statusCode);
      if (res.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    });
    // An unsampled span is not made active (contextWithSpan): its queries then make no spans at all.
    const active = contextWithSpan(parent, span);
    // The fast path reads the body in `data`/`end` listeners: bound, they run inside the request's span
    // (an emitter's listeners otherwise run in whatever context emitted the event). The response needs
    // no binding: it is written from the request's own async chain.
    context.bind(active, req);
    context.with(active, () => listener(req, res));
  };
}

/**
 * Names the active request span after the operation, its type and the document's operation name
 * (`query Posts`, `mutation Publish`), and records `graphql.operation.type` and `graphql.operation.name`.
 * Called where a document is about to run: the Yoga pipeline (`useOperationSpanName`) and the fast path's
 * compiled queries. Nothing when tracing is off.
 */
export function nameOperationSpan(document: DocumentNode, operationName: string | null | undefined): void {
  if (!isTracing()) return;
  const span: Span | undefined = trace.getActiveSpan();
  if (!span?.isRecording()) return;
  const operation = getOperationAST(document, operationName);
  if (!operation) return;
  const name = operation.name?.value ?? operationName ?? '';
  span.updateName(name ? `${operation.operation} ${name}` : operation.operation);
  span.setAttribute('graphql.operation.type', operation.operation);
  if (name) span.setAttribute('graphql.operation.name', name);
}
