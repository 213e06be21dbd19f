import type { AsyncLocalStorage } from 'node:async_hooks';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { type Context, type ContextManager, ROOT_CONTEXT, TraceFlags, trace } from '@opentelemetry/api';
import type { ExportResult } from '@opentelemetry/core';
import type { InstrumentationBase } from '@opentelemetry/instrumentation';
import type { ReadableSpan, SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { Counter, type Registry } from 'prom-client';
import { threadedOtlpExporter } from './export-thread.js';
import { contextHeld, currentStretch, inStretch, rootAlreadyChosen, setTracing } from './trace-context.js';
import { readTracingConfig } from './tracing-config.js';

/**
 * Starts OpenTelemetry tracing from the standard `OTEL_*` variables (tracing-config.ts), or does
 * nothing at all: without an endpoint no SDK module is even loaded, and every span Herald asks for is the
 * API's no-op (trace-context.ts checks `isTracing()` before making one).
 *
 * When on: a NodeTracerProvider (AsyncLocalStorage context, on only while an operation needs it:
 * `OperationContextManager`; W3C trace context propagation; the sampler of `OTEL_TRACES_SAMPLER`), one
 * batch processor exporting OTLP over HTTP (protobuf or JSON), and the
 * PostgreSQL (`pg`) and Redis (`ioredis`) instrumentations, which only record a query inside a Herald
 * span (background polling makes no traces of its own).
 *
 * Order: instrumentations patch a module when it is required, but an app's main.ts has usually loaded
 * `pg` and `ioredis` already, so those are patched in place (see `patchAppModules`). Call this
 * before the first connection is opened.
 *
 * A collector that is down, slow or answering errors never slows a request: spans are queued in memory
 * (bounded, `OTEL_BSP_MAX_QUEUE_SIZE`, default 2048) and exported in the background; a span that finds
 * the queue full, or whose export failed, is dropped and counted in `herald_trace_spans_dropped_total`.
 */
/**
 * A fast path of tracing found off at start because a dependency's internals are not where this code
 * expects them (an upgrade moved them): tracing still works, only slower. `path` names it as the API's
 * `herald_fast_path_fallback{path}` does.
 */
export interface TracingFallback {
  path: 'tracing_context_storage' | 'tracing_instrumentation_gate' | 'tracing_pg_pool_listeners';
  reason: string;
}

export interface Tracing {
  /** Whether an SDK was started. */
  readonly enabled: boolean;
  /** The fast paths found off at start (empty when tracing is off, or when every internal was found). */
  readonly fallbacks: readonly TracingFallback[];
  /** Spans dropped so far (queue full or export failed). */
  dropped(): number;
  /** Adds `herald_trace_spans_dropped_total` to `registry` (a no-op when tracing is off). */
  registerMetrics(registry: Registry): void;
  /** Exports what is queued and stops, within `timeoutMs` (then gives up on the rest). Idempotent. */
  shutdown(timeoutMs?: number): Promise<void>;
}

/**
 * The versions the tracing fast paths were written against: `@opentelemetry/context-async-hooks` (as
 * `@opentelemetry/sdk-trace-node` loads it: its storage is turned off between sampled operations) and
 * `@opentelemetry/instrumentation` (its shimmer marks on wrapped methods, which the gate reads) and
 * `@opentelemetry/instrumentation-pg` (the method that adds its pool listeners, `withoutPoolListeners`).
 * start-tracing.test.ts fails when the installed ones differ; docs/development.md says what to rerun.
 */
export const TRACING_INTERNALS_VERSIONS = {
  '@opentelemetry/context-async-hooks': '2.12.1',
  '@opentelemetry/instrumentation': '0.223.0',
  '@opentelemetry/instrumentation-pg': '0.76.0',
} as const;

/** Default bound of the in-memory span queue, as the SDK's own default. */
const DEFAULT_MAX_QUEUE_SIZE = 2_048;
/** Default wait for the last export at shutdown. */
const DEFAULT_SHUTDOWN_TIMEOUT_MS = 2_000;

const DISABLED: Tracing = {
  enabled: false,
  fallbacks: [],
  dropped: () => 0,
  registerMetrics() {},
  async shutdown() {},
};

/**
 * @param options.serviceName the `service.name` unless `OTEL_SERVICE_NAME` is set
 * @param options.env where the on/off decision and the checked variables are read (tests).
 *   @default process.env; the SDK's own parts (exporter, sampler, queue) always read `process.env`
 * @throws TracingConfigError for a bad tracing variable (see `readTracingConfig`): nothing is started
 */
export async function startTracing(options: { serviceName: string; env?: NodeJS.ProcessEnv }): Promise<Tracing> {
  const env = options.env ?? process.env;
  const config = readTracingConfig(env, options.serviceName);
  if (!config.enabled) return DISABLED;

  const [{ NodeTracerProvider }, traceBase, resources, { registerInstrumentations }, pg, ioredis] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/instrumentation'),
    import('@opentelemetry/instrumentation-pg'),
    import('@opentelemetry/instrumentation-ioredis'),
  ]);
  const [{ JsonTraceSerializer, ProtobufTraceSerializer }, { OTLPExporterError }] = await Promise.all([
    import('@opentelemetry/otlp-transformer'),
    import('@opentelemetry/otlp-exporter-base'),
  ]);

  const maxQueueSize = positiveInteger(env.OTEL_BSP_MAX_QUEUE_SIZE) ?? DEFAULT_MAX_QUEUE_SIZE;
  const counts = { pending: 0, dropped: 0 };
  // The exporter's thread reads its endpoint, headers, timeout and compression from the OTEL_* variables
  // itself, as the SDK's OTLPTraceExporter does (export-thread.ts: why a thread).
  const exporter = countingExporter(
    config.protocol === 'http/json'
      ? threadedOtlpExporter('http/json', JsonTraceSerializer, OTLPExporterError)
      : threadedOtlpExporter('http/protobuf', ProtobufTraceSerializer, OTLPExporterError),
    counts,
  );
  const processor = boundedProcessor(
    new traceBase.BatchSpanProcessor(exporter, { maxQueueSize }),
    counts,
    maxQueueSize,
  );
  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ 'service.name': config.serviceName }))
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const followsParent = samplerFollowsParent(process.env.OTEL_TRACES_SAMPLER);
  const provider = new NodeTracerProvider({
    resource,
    spanProcessors: [processor],
    // Built here from the trimmed name, as readTracingConfig checked it: the SDK's own reading does not
    // trim, and would take `traceidratio ` (a trailing space) for its default, parentbased_always_on.
    sampler: followsParent
      ? sampledLinksSampler(traceBase, process.env)
      : parentIgnoringSampler(traceBase, process.env),
  });
  const contextManager = new (operationContextManager())();
  const fallbacks: TracingFallback[] = [];
  if (!contextManager.canTurnOff)
    fallbacks.push({
      path: 'tracing_context_storage',
      reason: "the SDK's context manager has no _asyncLocalStorage.disable(): the storage stays on",
    });
  provider.register({ contextManager });
  const pgInstrumentation = new pg.PgInstrumentation({ requireParentSpan: true });
  if (!withoutPoolListeners(pgInstrumentation))
    fallbacks.push({
      path: 'tracing_pg_pool_listeners',
      reason:
        "the pg instrumentation has no _setPoolConnectEventListeners(): a traced pool's every checkout runs its counters",
    });
  const instrumentations = [pgInstrumentation, new ioredis.IORedisInstrumentation({ requireParentSpan: true })];
  registerInstrumentations({ tracerProvider: provider, instrumentations });
  const gated = gateWrappedMethods(
    await patchAppModules(instrumentations),
    () => contextManager.on || currentStretch() !== undefined,
  );
  if (gated === 0)
    fallbacks.push({
      path: 'tracing_instrumentation_gate',
      reason:
        "no pg or ioredis method carries shimmer's __wrapped/__original marks: every query runs the instrumentation",
    });
  setTracing(true, {
    tracer: provider.getTracer('herald'),
    idle: () => contextManager.idle(),
    samplerFollowsParent: followsParent,
    ...(followsParent ? { rootRatio: rootSamplerRatio(process.env) } : {}),
  });

  let stopping: Promise<void> | undefined;
  return {
    enabled: true,
    fallbacks,
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
      let turnedOn = 0;
      new Counter({
        name: 'herald_trace_context_storage_turned_on_total',
        help: "Times the trace context storage (Node's async hooks, a cost to every request while on) was turned on for an operation that needed it",
        registers: [registry],
        collect() {
          if (contextManager.turnedOn > turnedOn) this.inc(contextManager.turnedOn - turnedOn);
          turnedOn = contextManager.turnedOn;
        },
      });
    },
    shutdown(timeoutMs = DEFAULT_SHUTDOWN_TIMEOUT_MS) {
      stopping ??= Promise.race([
        // A last flush that failed (the collector refused it) rejects before the SDK stops the exporter:
        // its thread is stopped here then.
        provider.shutdown().catch(() => exporter.shutdown().catch(() => {})),
        new Promise<void>((resolve) => setTimeout(resolve, timeoutMs).unref()),
      ]).then(() => setTracing(false));
      return stopping;
    },
  };
}

/** What Herald uses of the SDK's AsyncLocalStorage context manager. */
interface AsyncLocalStorageContextManager extends ContextManager {
  readonly _asyncLocalStorage: AsyncLocalStorage<Context>;
  /** Experimental in the SDK: `enterWith` the context. */
  attach(context: Context): unknown;
}

/**
 * The SDK's AsyncLocalStorage context manager, with its storage turned off while no operation holds it
 * (`holdContext`, trace-context.ts): on Node 20 an enabled AsyncLocalStorage makes every promise of the
 * process run async hooks, which cost an unsampled `posts` request more than all its tracing otherwise
 * (bench/results/tracing). Off, `active()` is the root context, and `with(root)` (`detached`) just
 * runs its work; any other `with` turns the storage on again (AsyncLocalStorage's `run` does).
 *
 * The class is `@opentelemetry/context-async-hooks`' own, loaded as `@opentelemetry/sdk-trace-node`
 * loads it (that package's dependency, at the version it was tested with).
 */
function operationContextManager() {
  const require = createRequire(import.meta.url);
  const fromSdk = createRequire(realpathSync(require.resolve('@opentelemetry/sdk-trace-node')));
  const { AsyncLocalStorageContextManager: Base } = fromSdk('@opentelemetry/context-async-hooks') as {
    AsyncLocalStorageContextManager: new () => AsyncLocalStorageContextManager;
  };
  return class OperationContextManager extends Base {
    #on = false;
    /** The root context of the API copy the SDK uses (ours may be another build: see trace-context.ts). */
    readonly #sdkRoot = this.active();

    /** An operation's stretch (`inStretch`, trace-context.ts) first, then the storage's. */
    override active(): Context {
      return currentStretch() ?? super.active();
    }

    override with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
      context: Context,
      fn: F,
      thisArg?: ThisParameterType<F>,
      ...args: A
    ): ReturnType<F> {
      // In a stretch, `with` is a stretch: synchronous, no storage.
      if (currentStretch() !== undefined) return inStretch(context, () => fn.apply(thisArg, args));
      if (!this.#on) {
        // Off, the root context is already the active one everywhere.
        if (context === ROOT_CONTEXT || context === this.#sdkRoot) return fn.apply(thisArg, args);
        this.#turnOn();
        // Outside any held operation (a listener bound to a request that already ended, say): the context
        // holds for `fn`'s synchronous part only, unless `fn` took a hold (an export does).
        if (!contextHeld())
          try {
            return super.with(context, fn, thisArg, ...args);
          } finally {
            if (!contextHeld()) this.idle();
          }
      }
      return super.with(context, fn, thisArg, ...args);
    }

    /**
     * A function bound in a stretch runs in a stretch of `context` (the pg instrumentation binds a query's
     * callback to the query's parent): without it, every call would turn the storage on for one tick.
     */
    override bind<T>(context: Context, target: T): T {
      if (typeof target !== 'function' || currentStretch() === undefined) return super.bind(context, target);
      const fn = target as (...args: unknown[]) => unknown;
      return function (this: unknown, ...args: unknown[]) {
        return inStretch(context, () => fn.apply(this, args));
      } as T;
    }

    /** `enterWith`, underneath: the storage is on from here. */
    override attach(context: Context): unknown {
      this.#turnOn();
      return super.attach(context);
    }

    /** Times the storage was turned on (`herald_trace_context_storage_turned_on_total`). */
    get turnedOn(): number {
      return this.#turnedOn;
    }

    #turnedOn = 0;

    #turnOn(): void {
      if (!this.#on) this.#turnedOn++;
      this.#on = true;
    }

    /** Whether the storage is on: off, the active context is the root one everywhere. */
    get on(): boolean {
      return this.#on;
    }

    /** Whether the SDK's storage can be turned off (its internals are where this class expects them). */
    get canTurnOff(): boolean {
      return typeof this._asyncLocalStorage?.disable === 'function';
    }

    /**
     * Turns the storage off (no held operation left): until the next `with`, no async hooks run. Where
     * the SDK's storage is not found ({@link canTurnOff}), it stays on: slower, never wrong.
     */
    idle(): void {
      if (!this.#on || !this.canTurnOff) return;
      this.#on = false;
      this._asyncLocalStorage.disable();
    }
  };
}

/**
 * Applies `instrumentations` to the very module objects the app uses. Registering them hooks `require`,
 * which patches a module when it is required; but an app's main.ts imports `pg` and `ioredis` as ES
 * modules (or a bundle does), usually before tracing starts, and depending on the loader such an import
 * never goes through `require` at all. So each module definition is resolved as the app resolves it
 * (`pg`, `ioredis`; `pg-pool` is pg's `Pool` base class), imported (the ES module cache hands back the
 * instance the app has), and patched in place: the prototypes, which every connection shares, get the
 * wrappers. A module this app does not have is skipped.
 */
async function patchAppModules(instrumentations: readonly InstrumentationBase[]): Promise<unknown[]> {
  const patched: unknown[] = [];
  const require = createRequire(import.meta.url);
  const found = new Map<string, { exports: unknown; version: string } | undefined>();
  const load = async (name: string) => {
    if (!found.has(name)) found.set(name, await appModule(require, name).catch(() => undefined));
    return found.get(name);
  };
  for (const instrumentation of instrumentations) {
    for (const definition of instrumentation.getModuleDefinitions()) {
      let module: { exports: unknown; version: string } | undefined;
      if (definition.name === 'pg-pool') {
        const pg = await load('pg');
        const base = pg && Object.getPrototypeOf((pg.exports as { Pool: object }).Pool);
        const version =
          pg && packageVersion(createRequire(realpathSync(require.resolve('pg'))).resolve('pg-pool'), 'pg-pool');
        module = base && version ? { exports: base, version } : undefined;
      } else {
        module = await load(definition.name);
      }
      if (module && definition.patch) {
        definition.patch(module.exports, module.version);
        patched.push(module.exports);
      }
    }
  }
  return patched;
}

/** A function an instrumentation wrapped (shimmer marks the wrapper so). */
interface Wrapped {
  (...args: unknown[]): unknown;
  __wrapped?: boolean;
  __original?: (...args: unknown[]) => unknown;
  __unwrap?: () => void;
}

/**
 * Puts a gate in front of every method the instrumentations wrapped in `modules` (on their prototypes:
 * `pg`'s `Client`, `pg-pool`, `ioredis`): while the context storage is off there is no active span
 * anywhere, so the instrumentations (`requireParentSpan`) would only look for one and call the original;
 * the gate calls the original straight away. With a ratio sampler that is every query of an unsampled
 * request while no sampled one is in flight (bench/results/tracing). While the storage is on, the
 * instrumentation's wrapper runs as it would without the gate. Shimmer's marks are kept.
 * @returns how many methods were gated (0: shimmer's marks were not found, see `fallbacks`)
 */
function gateWrappedMethods(modules: readonly unknown[], storageOn: () => boolean): number {
  let gated = 0;
  const targets = new Set<object>();
  for (const exports of modules) {
    const value = exports as { prototype?: unknown; Client?: { prototype?: unknown } } | undefined;
    for (const target of [value?.prototype, value?.Client?.prototype])
      if (target && typeof target === 'object') targets.add(target);
  }
  for (const target of targets) {
    for (const key of Object.getOwnPropertyNames(target)) {
      const wrapped = Object.getOwnPropertyDescriptor(target, key)?.value as Wrapped | undefined;
      if (typeof wrapped !== 'function' || !wrapped.__wrapped || typeof wrapped.__original !== 'function') continue;
      const original = wrapped.__original;
      const gate: Wrapped = function (this: unknown) {
        // biome-ignore lint/complexity/noArguments: forwarded as is, without copying them into an array
        return Reflect.apply(storageOn() ? wrapped : original, this, arguments);
      };
      Object.defineProperty(gate, 'length', { value: wrapped.length });
      Object.defineProperty(gate, 'name', { value: wrapped.name });
      gate.__wrapped = true;
      gate.__original = original;
      gate.__unwrap = wrapped.__unwrap;
      (target as Record<string, unknown>)[key] = gate;
      gated++;
    }
  }
  return gated;
}

/**
 * Stops the pg instrumentation from listening to the pools it traces. At the first traced `connect` of a
 * pool it adds four listeners to it (connect, acquire, release, remove) that keep pool-usage counters for
 * OpenTelemetry metrics. Herald exports no OpenTelemetry metrics (its pools' figures are on `/metrics`), so
 * the counters go to a no-op meter; but the listeners run on every checkout and release of that pool for
 * the rest of the process, sampled request or not: from the first sampled request on, every request paid
 * for them (bench/results/tracing). The method that adds them is replaced by one that adds nothing.
 * @returns false where the method is not found (an upgrade renamed it): the listeners are added as before
 */
function withoutPoolListeners(instrumentation: object): boolean {
  const target = instrumentation as { _setPoolConnectEventListeners?: unknown };
  if (typeof target._setPoolConnectEventListeners !== 'function') return false;
  target._setPoolConnectEventListeners = () => {};
  return true;
}

/** The CommonJS exports of `name` as the app's ES modules see them, and its version. */
async function appModule(require: NodeJS.Require, name: string): Promise<{ exports: unknown; version: string }> {
  // The real path, as the app's imports resolve it (pnpm links packages): the same module instance.
  const entry = realpathSync(require.resolve(name));
  const imported = (await import(pathToFileURL(entry).href)) as { default: unknown };
  const version = packageVersion(entry, name);
  if (!version) throw new Error(`no package.json for ${name}`);
  return { exports: imported.default, version };
}

/** The version in the nearest `package.json` named `name` above `entry`. */
function packageVersion(entry: string, name: string): string | undefined {
  for (let dir = dirname(entry); dirname(dir) !== dir; dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (!existsSync(manifest)) continue;
    const { name: found, version } = JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string; version: string };
    if (found === name) return version;
  }
  return undefined;
}

/**
 * Counts spans whose export did not succeed, and those that left the queue.
 *
 * An export holds no context: the batch processor starts it in a context of its own (tracing
 * suppressed), which turns the storage on for the synchronous part of that call only
 * (`OperationContextManager`), and the rest of the export (its HTTP request, the collector's answer) runs
 * in none. Held until the collector answered, the storage stayed on for the whole round trip, and every
 * promise the process made meanwhile ran async hooks: a dispatcher at a ratio of 0.01 paid a quarter more
 * CPU per delivery while an export waited on a busy collector (bench/results/tracing). Nothing in the
 * export needs the suppressed context afterwards: the HTTP client is not instrumented.
 */
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

/** Samplers the SDK builds from `OTEL_TRACES_SAMPLER` that decide without asking the parent. */
const SAMPLERS_IGNORING_PARENT: readonly string[] = ['always_on', 'always_off', 'traceidratio'];

/**
 * Whether the sampler the SDK builds from `OTEL_TRACES_SAMPLER` (it reads `process.env` itself) follows a
 * parent's decision: every `parentbased_*` one, and the SDK's default when the variable is unset or
 * unknown (`parentbased_always_on`). Lets trace-context.ts skip the SDK for spans under an unsampled parent.
 */
export function samplerFollowsParent(sampler: string | undefined): boolean {
  return !SAMPLERS_IGNORING_PARENT.includes(sampler?.trim() ?? '');
}

/**
 * The parent-based sampler `OTEL_TRACES_SAMPLER` names (the SDK's own mapping: `parentbased_always_on`
 * when unset or unknown, `parentbased_always_off`, `parentbased_traceidratio` with `OTEL_TRACES_SAMPLER_ARG`,
 * 1 when blank), with one rule in front: a new trace whose links include a sampled span context is sampled.
 * Only Herald's batch spans have links (`recordBatchSpan`, trace-context.ts), and they link only to sampled
 * events: a batch that served a sampled publish is recorded, so that publish's trace leads to it at any
 * ratio (left to the ratio, a sampled event's batch spans would be recorded once in a hundred at 0.01).
 * The rule follows the links as the parent-based sampler follows a parent. And a new trace that
 * `startRootSpan` (trace-context.ts) already chose, with the same ratio, is sampled without a second draw.
 */
function sampledLinksSampler(
  sdk: typeof import('@opentelemetry/sdk-trace-base'),
  env: NodeJS.ProcessEnv,
): import('@opentelemetry/sdk-trace-base').Sampler {
  const ratio = rootSamplerRatio(env);
  const root =
    ratio === 0
      ? new sdk.AlwaysOffSampler()
      : ratio === 1
        ? new sdk.AlwaysOnSampler()
        : new sdk.TraceIdRatioBasedSampler(ratio);
  const parentBased = new sdk.ParentBasedSampler({ root });
  return {
    shouldSample(context, traceId, spanName, spanKind, attributes, links) {
      if (
        trace.getSpanContext(context) === undefined &&
        (rootAlreadyChosen() || links.some((link) => (link.context.traceFlags & TraceFlags.SAMPLED) !== 0))
      )
        return { decision: sdk.SamplingDecision.RECORD_AND_SAMPLED };
      return parentBased.shouldSample(context, traceId, spanName, spanKind, attributes, links);
    },
    toString: () => `SampledLinks{${parentBased.toString()}}`,
  };
}

/**
 * The share of new traces a parent-based `OTEL_TRACES_SAMPLER` records, as the SDK maps it:
 * `parentbased_always_off` 0, `parentbased_traceidratio` its `OTEL_TRACES_SAMPLER_ARG` (1 when blank or not
 * a ratio), anything else (`parentbased_always_on`, unset, unknown) 1.
 */
export function rootSamplerRatio(env: NodeJS.ProcessEnv): number {
  const name = env.OTEL_TRACES_SAMPLER?.trim();
  if (name === 'parentbased_always_off') return 0;
  if (name !== 'parentbased_traceidratio') return 1;
  return samplerArgRatio(env);
}

/** `OTEL_TRACES_SAMPLER_ARG` as the SDK reads a ratio: 1 when blank, not a number or outside 0–1. */
function samplerArgRatio(env: NodeJS.ProcessEnv): number {
  const ratio = Number(env.OTEL_TRACES_SAMPLER_ARG?.trim() || 1);
  return Number.isFinite(ratio) && ratio >= 0 && ratio <= 1 ? ratio : 1;
}

/** The sampler of a `OTEL_TRACES_SAMPLER` that ignores parents (`always_on`, `always_off`, `traceidratio`). */
function parentIgnoringSampler(
  sdk: typeof import('@opentelemetry/sdk-trace-base'),
  env: NodeJS.ProcessEnv,
): import('@opentelemetry/sdk-trace-base').Sampler {
  const name = env.OTEL_TRACES_SAMPLER?.trim();
  if (name === 'always_off') return new sdk.AlwaysOffSampler();
  if (name === 'traceidratio') return new sdk.TraceIdRatioBasedSampler(samplerArgRatio(env));
  return new sdk.AlwaysOnSampler();
}

function positiveInteger(value: string | undefined): number | undefined {
  const parsed = Number(value);
  return Number.isInteger(parsed) && parsed > 0 ? parsed : undefined;
}
