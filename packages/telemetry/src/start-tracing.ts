import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import type { ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { Counter, type Registry } from 'prom-client';
import { setTracing } from './trace-context.js';
import { readTracingConfig } from './tracing-config.js';

/**
 * Starts OpenTelemetry tracing from the standard `OTEL_*` variables (tracing-config.ts), or does
 * nothing at all: without an endpoint no SDK module is even loaded, and every span Herald asks for is the
 * API's no-op (trace-context.ts checks `isTracing()` before making one).
 *
 * When on: a NodeTracerProvider (AsyncLocalStorage context, W3C trace context propagation, the sampler
 * of `OTEL_TRACES_SAMPLER`), one batch processor exporting OTLP over HTTP (protobuf or JSON), and the
 * PostgreSQL (`pg`) and Redis (`ioredis`) instrumentations, which only record a query inside a Herald
 * span (background polling makes no traces of its own).
 *
 * Order: instrumentations patch a module when it is required. An app's main.ts has usually loaded `pg`
 * and `ioredis` already (static imports, or a bundle whose imports all load first), so after
 * registering, they are required again here: the hook then patches the cached module's prototypes,
 * which live connections share. Call this before the first connection is opened.
 *
 * A collector that is down, slow or answering errors never slows a request: spans are queued in memory
 * (bounded, `OTEL_BSP_MAX_QUEUE_SIZE`, default 2048) and exported in the background; a span that finds
 * the queue full, or whose export failed, is dropped and counted in `herald_trace_spans_dropped_total`.
 */
export interface Tracing {
  /** Whether an SDK was started. */
  readonly enabled: boolean;
  /** Spans dropped so far (queue full or export failed). */
  dropped(): number;
  /** Adds `herald_trace_spans_dropped_total` to `registry` (a no-op when tracing is off). */
  registerMetrics(registry: Registry): void;
  /** Exports what is queued and stops, within `timeoutMs` (then gives up on the rest). Idempotent. */
  shutdown(timeoutMs?: number): Promise<void>;
}

/** Default bound of the in-memory span queue, as the SDK's own default. */
const DEFAULT_MAX_QUEUE_SIZE = 2_048;
/** Default wait for the last export at shutdown. */
const DEFAULT_SHUTDOWN_TIMEOUT_MS = 2_000;

const DISABLED: Tracing = {
  enabled: false,
  dropped: () => 0,
  registerMetrics() {},
  async shutdown() {},
};

/**
 * @param options.serviceName the `service.name` unless `OTEL_SERVICE_NAME` is set
 * @throws TracingConfigError for a bad tracing variable (see `readTracingConfig`)
 */
export async function startTracing(options: { serviceName: string; env?: NodeJS.ProcessEnv }): Promise<Tracing> {
  const env = options.env ?? process.env;
  const config = readTracingConfig(env, options.serviceName);
  if (!config.enabled) return DISABLED;

  const [{ NodeTracerProvider }, { BatchSpanProcessor }, resources, { registerInstrumentations }, pg, ioredis] =
    await Promise.all([
      import('@opentelemetry/sdk-trace-node'),
      import('@opentelemetry/sdk-trace-base'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/instrumentation'),
      import('@opentelemetry/instrumentation-pg'),
      import('@opentelemetry/instrumentation-ioredis'),
    ]);
  const { OTLPTraceExporter } =
    config.protocol === 'http/json'
      ? await import('@opentelemetry/exporter-trace-otlp-http')
      : await import('@opentelemetry/exporter-trace-otlp-proto');

  const maxQueueSize = positiveInteger(env.OTEL_BSP_MAX_QUEUE_SIZE) ?? DEFAULT_MAX_QUEUE_SIZE;
  const counts = { pending: 0, dropped: 0 };
  // The exporter reads its endpoint, headers, timeout and compression from the OTEL_* variables itself.
  const exporter = countingExporter(new OTLPTraceExporter(), counts);
  const processor = boundedProcessor(new BatchSpanProcessor(exporter, { maxQueueSize }), counts, maxQueueSize);
  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ 'service.name': config.serviceName }))
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const provider = new NodeTracerProvider({ resource, spanProcessors: [processor] });
  provider.register();
  registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [
      new pg.PgInstrumentation({ requireParentSpan: true }),
      new ioredis.IORedisInstrumentation({ requireParentSpan: true }),
    ],
  });
  patchLoadedModules();
  setTracing(true);

  let stopping: Promise<void> | undefined;
  return {
    enabled: true,
    dropped: () => counts.dropped,
    registerMetrics(registry) {
      let counted = 0;
      new Counter({
        name: 'herald_trace_spans_dropped_total',
        help: 'Trace spans dropped because the export queue was full or the collector refused or missed them',
        registers: [registry],
        collect() {
          if (counts.dropped > counted) this.inc(counts.dropped - counted);
          counted = counts.dropped;
        },
      });
    },
    shutdown(timeoutMs = DEFAULT_SHUTDOWN_TIMEOUT_MS) {
      stopping ??= Promise.race([
        provider.shutdown().catch(() => {}),
        new Promise<void>((resolve) => setTimeout(resolve, timeoutMs).unref()),
      ]).then(() => setTracing(false));
      return stopping;
    },
  };
}

/**
 * Requires `pg`, `pg-pool` (from pg's own folder: it is pg's dependency, not ours) and `ioredis` again,
 * so the instrumentations patch modules that were loaded before they were registered. A module the app
 * does not have is skipped.
 */
function patchLoadedModules(): void {
  const require = createRequire(import.meta.url);
  for (const load of [
    () => require('pg'),
    () => createRequire(dirname(require.resolve('pg')))('pg-pool'),
    () => require('ioredis'),
  ]) {
    try {
      load();
    } catch {
      // Not installed beside this app (the dispatcher has no use for some): nothing to patch.
    }
  }
}

/** Counts spans whose export did not succeed, and those that left the queue. */
function countingExporter(inner: SpanExporter, counts: { pending: number; dropped: number }): SpanExporter {
  return {
    export(spans: ReadableSpan[], done: (result: ExportResult) => void) {
      counts.pending = Math.max(0, counts.pending - spans.length);
      inner.export(spans, (result) => {
        // ExportResultCode.SUCCESS is 0; anything else lost these spans.
        if (result.code !== 0) counts.dropped += spans.length;
        done(result);
      });
    },
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
}

/**
 * The batch processor behind a bound of our own, equal to its queue's: a span past it is dropped here
 * and counted (the SDK's processor would drop it as silently as a log line at debug level).
 */
function boundedProcessor(
  inner: SpanProcessor,
  counts: { pending: number; dropped: number },
  maxQueueSize: number,
): SpanProcessor {
  return {
    onStart: (span, parentContext) => inner.onStart(span, parentContext),
    onEnd(span) {
      // Unsampled spans never reach the exporter (the batch processor skips them).
      if ((span.spanContext().traceFlags & 1) === 0) return;
      if (counts.pending >= maxQueueSize) {
        counts.dropped += 1;
        return;
      }
      counts.pending += 1;
      inner.onEnd(span);
    },
    forceFlush: () => inner.forceFlush(),
    shutdown: () => inner.shutdown(),
  };
}

function positiveInteger(value: string | undefined): number | undefined {
  const parsed = Number(value);
  return Number.isInteger(parsed) && parsed > 0 ? parsed : undefined;
}
