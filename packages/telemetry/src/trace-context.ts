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
  type SpanOptions,
  type Tracer,
  trace,
} from '@opentelemetry/api';

/**
 * What the rest of Herald uses to trace: only `@opentelemetry/api`, whose calls are no-ops until an SDK
 * registers (start-tracing.ts). Hot paths still check {@link isTracing} first, so with tracing off they
 * do not even format a traceparent or allocate a span.
 */

let tracing = false;
/** Whether the SDK's sampler follows a parent's decision (every `parentbased_*` sampler; see {@link setTracing}). */
let samplerFollowsParent = false;
let heraldTracer: Tracer = trace.getTracer('herald');
/**
 * The share of new traces the sampler records, where that is all its decision for a trace with no parent
 * depends on (every `parentbased_*` sampler: always_on 1, always_off 0, traceidratio its ratio); undefined
 * otherwise, and then the SDK decides each one ({@link startRootSpan}).
 */
let rootRatio: number | undefined;
/** True for the length of one `startSpan` call whose new trace {@link startRootSpan} already chose to record. */
let rootChosen = false;
/** Operations holding the context storage on (see {@link holdContext}). */
let heldOperations = 0;
/** Turns the context storage off (start-tracing.ts); called when the last held operation ends. */
let contextStorageIdle: (() => void) | undefined;

/** True once `startTracing` registered an SDK in this process. One boolean read: cheap enough for hot paths. */
export function isTracing(): boolean {
  return tracing;
}

/**
 * For start-tracing.ts only: the SDK's own tracer, held directly. A tracer taken from the API before the
 * SDK registered is a proxy bound to the API copy that made it, and `@opentelemetry/api` ships an ESM and
 * a CommonJS build: a proxy made by one never learns of a provider the other registered. `idle` turns the
 * context storage off once no operation holds it (start-tracing.ts, `OperationContextManager`).
 */
export function setTracing(
  on: boolean,
  sdk?: { tracer: Tracer; idle: () => void; samplerFollowsParent: boolean; rootRatio?: number },
): void {
  tracing = on;
  heraldTracer = sdk?.tracer ?? trace.getTracer('herald');
  contextStorageIdle = sdk?.idle;
  samplerFollowsParent = on && (sdk?.samplerFollowsParent ?? false);
  rootRatio = on ? sdk?.rootRatio : undefined;
}

/**
 * The first span of a new trace (an operation no caller's trace reaches), or undefined when the sampler
 * leaves that trace out. Where the sampler's decision for a new trace is a share of them ({@link rootRatio}),
 * it is made here with one random number, and a trace left out costs nothing more: no ids, no sampler, no
 * span object (at a ratio of 0.01, 99 % of requests; about 10 µs each, bench/results/tracing). A trace
 * chosen is started by the SDK, told (through {@link rootAlreadyChosen}) not to decide a second time.
 * Otherwise the SDK's sampler decides, and its span is returned whether it records or not.
 */
export function startRootSpan(name: string, options: SpanOptions): Span | undefined {
  if (rootRatio === undefined) return heraldTracer.startSpan(name, options, ROOT_CONTEXT);
  if (!(Math.random() < rootRatio)) return undefined;
  rootChosen = true;
  try {
    return heraldTracer.startSpan(name, options, ROOT_CONTEXT);
  } finally {
    rootChosen = false;
  }
}

/** For the sampler (start-tracing.ts): whether the new trace being started was chosen by {@link startRootSpan}. */
export function rootAlreadyChosen(): boolean {
  return rootChosen;
}

/** The tracer every hand-made Herald span comes from. */
export function tracer(): Tracer {
  return heraldTracer;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * Where an unsampled operation that continues a caller's trace keeps its span context: not as the active
 * span, so the PostgreSQL and Redis instrumentations (which only record under an active span) skip its
 * queries entirely instead of making a no-op span for each, but still there for {@link activeTraceparent}
 * and the log fields.
 */
const UNSAMPLED_SPAN_KEY = createContextKey('herald unsampled span context');

/**
 * The context an operation's work runs in, or undefined when it needs none:
 * - `span` records: `span` as the active span (its PostgreSQL and Redis calls nest under it);
 * - `span` does not record but `parent` carries a caller's trace (a `traceparent` that said "not
 *   sampled"): only its span context, under a key of Herald's own (see above), so a publish stores the
 *   caller's trace id with the not-sampled flag;
 * - neither (the SDK's sampler said no to a new trace: under a sampler that ignores parents, since
 *   under a parent-based one {@link startRootSpan} makes no span for it at all): undefined. Such
 *   an operation runs in no context at all, so the context storage, and Node's async hooks behind it,
 *   can stay off ({@link holdContext}); a publish from it stores a not-sampled `traceparent` of its own
 *   ({@link activeTraceparent}).
 */
export function operationContext(parent: Context, span: Span): Context | undefined {
  if (span.isRecording()) return trace.setSpan(parent, span);
  // The caller's span leaves the context: the instrumentations would take it for a parent.
  if (trace.getSpanContext(parent)) return trace.deleteSpan(parent).setValue(UNSAMPLED_SPAN_KEY, span.spanContext());
  return undefined;
}

/**
 * Holds the context storage on until the returned function is called (once; later calls do nothing).
 *
 * On Node 20 an enabled AsyncLocalStorage runs async hooks on every promise the process makes, whoever
 * makes it (bench/results/PROFILE.md): left on after the first sampled request, it would cost every
 * unsampled one too. So the storage is on only while an operation that needs a context is in flight:
 * each takes a hold for its whole life (an HTTP request until its response closed, a socket operation
 * until it settled), and when the last hold is released the storage is turned off until the next
 * `context.with`. Work an operation leaves running after its hold (a timer it set) then runs in no
 * context, as work scheduled outside any operation does (see {@link detached}).
 */
export function holdContext(): () => void {
  heldOperations++;
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    if (--heldOperations === 0) contextStorageIdle?.();
  };
}

/**
 * `listener` bound to the operation context active here (an emitter's listener that does the operation's
 * work, which would otherwise run in whatever context emitted its event), or `listener` itself where no
 * operation's context is active (none holds one, {@link holdContext}, or this is not one of them).
 * In an operation's stretch ({@link inStretch}) the listener runs in a stretch of the same operation.
 * Bind listeners, not the emitter: `context.bind(ctx, emitter)` puts eight methods on that one object,
 * a shape of its own, and node's optimised code for the usual shape (streams, sockets) is thrown away
 * and made again for every object after it (bench/results/tracing).
 */
export function bindToOperation<F extends (...args: never[]) => unknown>(listener: F): F {
  if (stretch !== undefined) {
    const operation = stretch;
    return function (this: unknown, ...args: Parameters<F>) {
      return inStretch(operation, () => Reflect.apply(listener, this, args));
    } as F;
  }
  // While another operation holds the storage on, an untraced request's listener is registered in the
  // root context: nothing to bind it to.
  return tracing && heldOperations > 0 && activeSpanContext() !== undefined
    ? context.bind(context.active(), listener)
    : listener;
}

/**
 * The operation whose synchronous stretch is running ({@link inStretch}), if any. The context manager
 * (start-tracing.ts) answers it as the active context, ahead of the storage.
 */
let stretch: Context | undefined;

/**
 * Runs the synchronous part of `work` as the operation `operation` (the active context until `work`
 * returns), without the context storage: what `work` starts asynchronously runs in no context, unless
 * it carries the operation along itself ({@link currentStretch}; @herald/db's pool gives it to the queries
 * of a connection checked out in a stretch) or hands over to the storage ({@link continueInStorage}).
 * Inside a stretch, `context.with` is a stretch too.
 *
 * For operations whose traced calls are made from code that can carry them: the HTTP fast path's
 * queries. The storage, held for an operation's whole life, costs every request the process serves
 * meanwhile (Node 20's async hooks run on every promise); a stretch costs nothing outside it
 * (bench/results/tracing/low-ratio-costs.md).
 */
export function inStretch<T>(operation: Context, work: () => T): T {
  const previous = stretch;
  stretch = operation;
  try {
    return work();
  } finally {
    stretch = previous;
  }
}

/** The operation whose stretch is running here ({@link inStretch}), to carry over an asynchronous step. */
export function currentStretch(): Context | undefined {
  return stretch;
}

/** What {@link continueInStorage} waits for: the operation's response. */
export interface ClosingResponse {
  readonly closed: boolean;
  once(event: 'close', listener: () => void): unknown;
}

/**
 * Runs `work` in the context storage as `operation` (by default the operation of the stretch running
 * here), holding the storage until `response` closes: for work that cannot carry its operation by hand
 * (Yoga's pipeline, a mutation that stores its trace context after several steps). Without an
 * operation, just runs `work`.
 */
export function continueInStorage<T>(
  response: ClosingResponse,
  work: () => T,
  operation: Context | undefined = stretch,
): T {
  if (operation === undefined) return work();
  const outer = stretch;
  const release = holdContext();
  if (response.closed) release();
  else response.once('close', release);
  stretch = undefined;
  try {
    return context.with(operation, work);
  } finally {
    stretch = outer;
  }
}

/** Whether an operation holds the context storage on ({@link holdContext}); for start-tracing.ts. */
export function contextHeld(): boolean {
  return heldOperations > 0;
}

/**
 * Runs `work` as the operation `span` stands for, in {@link operationContext} and holding the storage
 * until it settles; without a context needed, just runs it.
 */
export async function runInOperation<T>(parent: Context, span: Span, work: () => T | Promise<T>): Promise<T> {
  const active = operationContext(parent, span);
  if (!active) return await work();
  const release = holdContext();
  try {
    return await context.with(active, work);
  } finally {
    release();
  }
}

/** The span context of the operation running here, recorded or not. */
function activeSpanContext(): SpanContext | undefined {
  const active = context.active();
  return trace.getSpan(active)?.spanContext() ?? (active.getValue(UNSAMPLED_SPAN_KEY) as SpanContext | undefined);
}

/**
 * The W3C `traceparent` of the operation running here, or null while tracing is off. An unsampled
 * operation's is returned too (flags `00`), so work done later for the same event stays unsampled. An
 * operation running in no context is one the sampler said no to at its start, with no caller's trace to
 * continue ({@link operationContext}): it gets a not-sampled `traceparent` of a new trace, which tells
 * the webhook attempts and fan-out of its event the same as its own would have (its ids are recorded
 * nowhere).
 */
export function activeTraceparent(): string | null {
  if (!tracing) return null;
  const spanContext = activeSpanContext();
  return spanContext ? formatTraceparent(spanContext) : unsampledTraceparent();
}

/** Scratch space for {@link unsampledTraceparent}'s ids. */
const ID_BYTES = Buffer.alloc(24);

/**
 * `00-<new trace id>-<new span id>-00`. Ids as the SDK's own generator makes them (Math.random, not
 * crypto: `randomBytes` would cost a publish several µs), never all zeros.
 */
function unsampledTraceparent(): string {
  for (let offset = 0; offset < 24; offset += 4) ID_BYTES.writeUInt32BE((Math.random() * 2 ** 32) >>> 0, offset);
  ID_BYTES[15] ||= 1;
  ID_BYTES[23] ||= 1;
  return `00-${ID_BYTES.toString('hex', 0, 16)}-${ID_BYTES.toString('hex', 16, 24)}-00`;
}

/**
 * Whether a span started under the stored `traceparent` is sure not to record: that parent said "not
 * sampled", and the sampler follows the parent's decision (every `parentbased_*` sampler, the SDK's
 * default). At a ratio of 0.01 that is 99 % of the events a dispatcher or a fan-out sees; for them Herald
 * skips the SDK altogether, which would generate ids, run the sampler and wrap a span that does nothing
 * (several µs on a path that runs once per webhook attempt).
 */
export function unsampledParent(traceparent: string | null | undefined): boolean {
  return (
    samplerFollowsParent &&
    traceparent != null &&
    !SAMPLED_FLAG_DIGITS.includes(traceparent.charAt(54)) &&
    WELL_FORMED_TRACEPARENT.test(traceparent) &&
    !traceparent.startsWith(ZERO_TRACE_ID, 3) &&
    !traceparent.startsWith(ZERO_SPAN_ID, 36)
  );
}

/**
 * {@link TRACEPARENT} without its groups, and the all-zero ids it must not hold: {@link parseTraceparent}'s
 * checks without allocating (the per-attempt path runs them for every delivery).
 */
const WELL_FORMED_TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
const ZERO_TRACE_ID = '0'.repeat(32);
const ZERO_SPAN_ID = '0'.repeat(16);

/**
 * The `traceparent` a span started under the stored one would carry onward when {@link unsampledParent}:
 * the same trace, a new span id, the parent's flags (so whatever continues it stays unsampled). Undefined
 * when the SDK must make the span (the parent is sampled, absent or malformed, or the sampler decides
 * alone).
 */
export function unsampledChildTraceparent(traceparent: string | null | undefined): string | undefined {
  if (!traceparent || !unsampledParent(traceparent)) return undefined;
  ID_BYTES.writeUInt32BE((Math.random() * 2 ** 32) >>> 0, 16);
  ID_BYTES.writeUInt32BE((Math.random() * 2 ** 32) >>> 0, 20);
  ID_BYTES[23] ||= 1;
  // `00-` + 32 hex digits + `-`: 36 characters; the flags are the last two.
  return `${traceparent.slice(0, 36)}${ID_BYTES.toString('hex', 16, 24)}${traceparent.slice(52)}`;
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

/** The last character of a `traceparent` whose flags have the sampled bit (the flags' low hex digit is odd). */
const SAMPLED_FLAG_DIGITS = '13579bdf';

/**
 * Records, once it is done, work that served several events at once (one batch statement, one history
 * append): a span of its own, started at `startTimeMs` (ms since the epoch), with a link to the trace of
 * each event whose publishing operation was sampled, never a span per event. Nothing when tracing is off
 * or none of the events was sampled: at a ratio of 0.01 most batches are skipped after a look at the
 * last character of each stored value, with no parsing and no sampler call. The span starts a trace of its
 * own; under a parent-based sampler it is recorded because of its sampled links (start-tracing.ts,
 * `sampledLinksSampler`), so a sampled publish finds the batch spans that served it.
 */
export function recordBatchSpan(
  name: string,
  startTimeMs: number,
  traceparents: readonly (string | null | undefined)[],
  attributes: Attributes,
): void {
  if (!tracing) return;
  const links: Link[] = [];
  for (const traceparent of traceparents) {
    if (!traceparent || !SAMPLED_FLAG_DIGITS.includes(traceparent.charAt(traceparent.length - 1))) continue;
    const spanContext = parseTraceparent(traceparent);
    if (spanContext) links.push({ context: spanContext });
  }
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
