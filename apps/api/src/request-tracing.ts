import type { RequestListener, Server } from 'node:http';
import { holdContext, inStretch, isTracing, operationContext, startRootSpan, tracer } from '@herald/telemetry';
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
 * A request the sampler leaves out and that continues no caller's trace only pays for that decision: it
 * runs in no context, so its queries meet no span and Node's async hooks stay off for it
 * (`operationContext`, `holdContext` in @herald/telemetry; bench/results/tracing). A traced request to the
 * fast path holds no context storage either unless the fast path hands it over (`stretches` below).
 */
export function traceGraphQLRequests(server: Server, path: string, options: { stretches: boolean }): void {
  if (!isTracing()) return;
  for (const listener of server.listeners('request') as RequestListener[]) {
    server.removeListener('request', listener);
    server.on('request', tracedListener(listener, path, options.stretches));
  }
}

/**
 * @param stretches the listener carries a traced request's operation itself (the HTTP fast path: its
 *   queries run in stretches of it, and it hands the rest over to the context storage,
 *   `continueInStorage`): the listener is called in a stretch of the operation (`inStretch`), and the
 *   storage is not held for the request. Otherwise (Yoga) the storage is held until the response closes.
 */
function tracedListener(listener: RequestListener, path: string, stretches: boolean): RequestListener {
  const postName = `POST ${path}`;
  return (req, res) => {
    const url = req.url ?? '';
    if (url !== path && !url.startsWith(`${path}?`)) return listener(req, res);
    const name = req.method === 'POST' ? postName : `${req.method} ${path}`;
    // Without a `traceparent` there is no caller's trace to extract (Herald reads no baggage): a new
    // trace, which the sampler mostly leaves out before any span is made (startRootSpan).
    let parent = ROOT_CONTEXT;
    let span: Span | undefined;
    if (req.headers.traceparent === undefined) span = startRootSpan(name, { kind: SpanKind.SERVER });
    else {
      parent = propagation.extract(ROOT_CONTEXT, req.headers);
      span = tracer().startSpan(name, { kind: SpanKind.SERVER }, parent);
    }
    // Not sampled and no caller's trace to continue: no context, no listener, nothing more to pay
    // (operationContext; a publish still stores "not sampled", activeTraceparent).
    const active = span && operationContext(parent, span);
    if (!span || !active) return listener(req, res);
    // Attributes only for a span that records (none of this reaches the exporter otherwise).
    if (span.isRecording()) span.setAttributes({ 'http.request.method': req.method ?? '', 'url.path': path });
    const release = stretches ? undefined : holdContext();
    res.once('close', () => {
      span.setAttribute('http.response.status_code', res.statusCode);
      if (res.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
      release?.();
    });
    // The request emitter is not bound (`context.bind(active, req)`): that puts eight methods on this one
    // IncomingMessage, a shape of its own, and node's stream code, optimised for the usual shape, is thrown
    // away and made again for every request after it (bench/results/tracing). The fast path binds its
    // `end` listener instead (`bindToOperation`, which carries a stretch too); Yoga reads the body through
    // promises, which carry the context. The response needs no binding: it is written from the request's
    // own async chain.
    if (stretches) {
      inStretch(active, () => listener(req, res));
      return;
    }
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
