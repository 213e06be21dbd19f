import {
  type Attributes,
  type Context,
  context,
  createContextKey,
  isSpanContextValid,
  type Link,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  type Tracer,
  trace,
} from '@opentelemetry/api';

/**
 * What the rest of Herald uses to trace: only `@opentelemetry/api`, whose calls are no-ops until an SDK
 * registers (start-tracing.ts). Hot paths still check {@link isTracing} first, so with tracing off they
 * do not even format a traceparent or allocate a span.
 */

let tracing = false;
let heraldTracer: Tracer = trace.getTracer('herald');

/** True once `startTracing` registered an SDK in this process. One boolean read: cheap enough for hot paths. */
export function isTracing(): boolean {
  return tracing;
}

/**
 * For start-tracing.ts only: the SDK's own tracer, held directly. A tracer taken from the API before the
 * SDK registered is a proxy bound to the API copy that made it, and `@opentelemetry/api` ships an ESM and
 * a CommonJS build: a proxy made by one never learns of a provider the other registered.
 */
export function setTracing(on: boolean, sdkTracer?: Tracer): void {
  tracing = on;
  heraldTracer = sdkTracer ?? trace.getTracer('herald');
}

/** The tracer every hand-made Herald span comes from. */
export function tracer(): Tracer {
  return heraldTracer;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * Where an unsampled operation keeps its span context: not as the active span, so the PostgreSQL and
 * Redis instrumentations (which only record under an active span) skip its queries entirely instead of
 * making a no-op span for each, but still there for {@link activeTraceparent} and the log fields.
 */
const UNSAMPLED_SPAN_KEY = createContextKey('herald unsampled span context');

/**
 * The context an operation's work runs in: `span` as the active span when it records, else only its
 * span context under a key of Herald's own (see above): with a ratio sampler most operations are
 * unsampled, and they then pay for no span below them.
 */
export function contextWithSpan(parent: Context, span: Span): Context {
  return span.isRecording() ? trace.setSpan(parent, span) : parent.setValue(UNSAMPLED_SPAN_KEY, span.spanContext());
}

/** The span context of the operation running here, recorded or not. */
function activeSpanContext(): SpanContext | undefined {
  const active = context.active();
  return trace.getSpan(active)?.spanContext() ?? (active.getValue(UNSAMPLED_SPAN_KEY) as SpanContext | undefined);
}

/**
 * The W3C `traceparent` of the operation running here, or null (tracing off, no operation). An unsampled
 * operation's is returned too (flags `00`), so work done later for the same event stays unsampled.
 */
export function activeTraceparent(): string | null {
  if (!tracing) return null;
  const spanContext = activeSpanContext();
  return spanContext ? formatTraceparent(spanContext) : null;
}

/** `00-<trace id>-<span id>-<flags>`, or null for an invalid context. */
export function formatTraceparent(spanContext: SpanContext): string | null {
  if (!isSpanContextValid(spanContext)) return null;
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
  return `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
}

/** The remote span context a stored `traceparent` names; undefined when it is absent or malformed. */
export function parseTraceparent(traceparent: string | null | undefined): SpanContext | undefined {
  if (!traceparent) return undefined;
  const match = TRACEPARENT.exec(traceparent);
  if (!match) return undefined;
  const spanContext: SpanContext = {
    traceId: match[1] as string,
    spanId: match[2] as string,
    traceFlags: Number.parseInt(match[3] as string, 16),
    isRemote: true,
  };
  return isSpanContextValid(spanContext) ? spanContext : undefined;
}

/**
 * A context whose parent is the stored `traceparent`: spans started in it join that trace. A missing or
 * malformed value gives the root context (a new trace), never an error: the event is delivered anyway.
 */
export function contextFromTraceparent(traceparent: string | null | undefined): Context {
  const spanContext = parseTraceparent(traceparent);
  return spanContext ? trace.setSpanContext(ROOT_CONTEXT, spanContext) : ROOT_CONTEXT;
}

/** Span links for work that serves several events at once (one batch statement, one append). */
export function linksFromTraceparents(traceparents: Iterable<string | null | undefined>): Link[] {
  const links: Link[] = [];
  for (const traceparent of traceparents) {
    const spanContext = parseTraceparent(traceparent);
    if (spanContext) links.push({ context: spanContext });
  }
  return links;
}

/**
 * Records, once it is done, work that served several events at once (one batch statement, one history
 * append): a span of its own, started at `startTimeMs` (ms since the epoch), with a link to each event's
 * trace, never a span per event. Nothing when tracing is off or no event carried a trace context (a
 * batch of events published untraced is not worth a trace of its own).
 */
export function recordBatchSpan(
  name: string,
  startTimeMs: number,
  traceparents: Iterable<string | null | undefined>,
  attributes: Attributes,
): void {
  if (!tracing) return;
  const links = linksFromTraceparents(traceparents);
  if (links.length === 0) return;
  heraldTracer
    .startSpan(name, { kind: SpanKind.INTERNAL, startTime: startTimeMs, links, attributes }, ROOT_CONTEXT)
    .end();
}

/**
 * Runs `work` outside any trace. For work a request only schedules (a timer that writes a batch for many
 * requests later): a timer keeps the context it was set in, and its statement would otherwise nest under
 * whichever request happened to set it, long after that request ended.
 */
export function detached<T>(work: () => T): T {
  return tracing ? context.with(ROOT_CONTEXT, work) : work();
}

/** Runs `work` in {@link contextWithSpan} (so PostgreSQL and Redis spans nest under a recorded span). */
export function withSpan<T>(span: Span, work: () => T): T {
  return context.with(contextWithSpan(context.active(), span), work);
}

/**
 * The active span's ids as log fields (`trace_id`, `span_id`), or nothing. A pino `mixin`: pino merges
 * the line's own fields into what it returns, so it is a fresh object every time.
 */
export function traceLogFields(): Record<string, string> {
  const spanContext = activeSpanContext();
  if (!spanContext) return {};
  return { trace_id: spanContext.traceId, span_id: spanContext.spanId };
}

/** The pino `mixin` option: the trace fields when tracing is on, undefined (no per-line call) when off. */
export function traceLogMixin(): (() => Record<string, string>) | undefined {
  return tracing ? traceLogFields : undefined;
}
