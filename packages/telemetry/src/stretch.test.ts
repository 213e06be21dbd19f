import { describe, expect, it } from 'vitest';
import { runInFreshProcess, START, TELEMETRY } from './fresh-process.test-support.js';

interface Seen {
  inStretch: { active: boolean; traceparent: string | null; symbols: string[]; childParent: string | undefined };
  spanId: string;
  withInStretch: { active: boolean; symbols: string[]; backToOperation: boolean };
  carried: boolean;
  activeAfter: boolean;
  /** A callback bound in the stretch (as the pg instrumentation binds a query's), called later. */
  boundCallback: { active: boolean; symbols: string[] };
  /** `herald_trace_context_storage_turned_on_total` after the stretches, and after the hand-over. */
  turnedOn: { afterStretches: number; afterHandOver: number };
  listener: boolean;
  inStorage: { active: boolean; symbols: string[] };
  heldUntilClose: string[];
  afterClose: string[];
}

/**
 * In a fresh process (the test runner keeps async hooks on) with tracing started and every trace sampled:
 * one operation run in stretches, then handed over to the storage until its response closes. The
 * storage's being on shows as the symbols AsyncLocalStorage puts on every promise made meanwhile.
 */
function runStretches(): Seen {
  const script = `
    const { EventEmitter } = await import('node:events');
    const { startTracing } = await import(${JSON.stringify(START)});
    const telemetry = await import(${JSON.stringify(TELEMETRY)});
    const { context, ROOT_CONTEXT, trace } = await import('@opentelemetry/api');
    const { Registry } = await import('prom-client');
    const tracing = await startTracing({ serviceName: 'test' });
    const registry = new Registry();
    tracing.registerMetrics(registry);
    const turnedOn = async () =>
      (await registry.getSingleMetric('herald_trace_context_storage_turned_on_total').get()).values[0]?.value ?? 0;
    const symbols = (promise) => Object.getOwnPropertySymbols(promise).map(String);
    const span = telemetry.tracer().startSpan('operation', {}, ROOT_CONTEXT);
    const operation = telemetry.operationContext(ROOT_CONTEXT, span);
    const out = { spanId: span.spanContext().spanId };
    const emitter = new EventEmitter();
    telemetry.inStretch(operation, () => {
      const child = telemetry.tracer().startSpan('child');
      out.inStretch = {
        active: trace.getActiveSpan() === span,
        traceparent: telemetry.activeTraceparent(),
        symbols: symbols(new Promise(() => {})),
        childParent: child.parentSpanContext?.spanId,
      };
      context.with(trace.setSpan(context.active(), child), () => {
        out.withInStretch = { active: trace.getActiveSpan() === child, symbols: symbols(new Promise(() => {})) };
      });
      out.withInStretch.backToOperation = trace.getActiveSpan() === span;
      emitter.on('event', telemetry.bindToOperation(() => { out.listener = trace.getActiveSpan() === span; }));
      out.carried = telemetry.currentStretch() === operation;
      const callback = context.bind(context.active(), () => {
        out.boundCallback = { active: trace.getActiveSpan() === span, symbols: symbols(new Promise(() => {})) };
      });
      setTimeout(callback, 1);
    });
    out.activeAfter = trace.getActiveSpan() === undefined;
    await new Promise((resolve) => setImmediate(resolve));
    emitter.emit('event');
    await new Promise((resolve) => setTimeout(resolve, 5));
    out.turnedOn = { afterStretches: await turnedOn() };
    const response = new EventEmitter();
    response.closed = false;
    out.inStorage = await telemetry.inStretch(operation, () =>
      telemetry.continueInStorage(response, async () => {
        await new Promise((resolve) => setTimeout(resolve, 5));
        return { active: trace.getActiveSpan() === span, symbols: symbols(new Promise(() => {})) };
      }),
    );
    out.heldUntilClose = symbols(new Promise(() => {}));
    out.turnedOn.afterHandOver = await turnedOn();
    response.closed = true;
    response.emit('close');
    await new Promise((resolve) => setImmediate(resolve));
    out.afterClose = symbols(new Promise(() => {}));
    process.stdout.write(JSON.stringify(out));
    process.exit(0);
  `;
  return runInFreshProcess<Seen>(script, { OTEL_TRACES_SAMPLER: 'parentbased_always_on' });
}

describe('an operation carried in stretches', () => {
  const seen = runStretches();

  it('is the active context for its synchronous part, without turning the context storage on', () => {
    expect(seen.inStretch.active).toBe(true);
    expect(seen.inStretch.traceparent).toBe(seen.inStretch.traceparent?.replace(/-[0-9a-f]{16}-/, `-${seen.spanId}-`));
    expect(seen.inStretch.childParent).toBe(seen.spanId);
    expect(seen.inStretch.symbols).toEqual([]);
    expect(seen.activeAfter).toBe(true);
  });

  it('makes `context.with` inside it a stretch too, and gives the operation back after it', () => {
    expect(seen.withInStretch).toEqual({ active: true, symbols: [], backToOperation: true });
  });

  it('is carried to a listener bound in it, and to whoever asks for it (@herald/db’s checkout)', () => {
    expect(seen.listener).toBe(true);
    expect(seen.carried).toBe(true);
  });

  it('runs a callback bound in it in a stretch again, never turning the storage on', () => {
    expect(seen.boundCallback).toEqual({ active: true, symbols: [] });
    expect(seen.turnedOn.afterStretches).toBe(0);
  });

  it('hands over to the context storage, held until the response closes', () => {
    expect(seen.inStorage.active).toBe(true);
    expect(seen.inStorage.symbols.length).toBeGreaterThan(0);
    expect(seen.heldUntilClose.length).toBeGreaterThan(0);
    expect(seen.afterClose).toEqual([]);
    expect(seen.turnedOn.afterHandOver).toBe(1);
  });
});
