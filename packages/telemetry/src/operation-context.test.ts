import { describe, expect, it } from 'vitest';
import { runInFreshProcess, START, TELEMETRY } from './fresh-process.test-support.js';

const CALLER_TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const CALLER_SPAN_ID = 'b7ad6b7169203331';

interface Seen {
  /** The own symbols of a promise made inside the operation, after an await. */
  symbols: string[];
  traceparent: string | null;
  logFields: Record<string, string>;
  /** Whether the operation's span was the active one after an await. */
  active: boolean;
  spanId: string;
  /** `activeTraceparent()` in the operation, and in its emitter's listeners bound and not bound to it. */
  listener: { own: string; bound: string; unbound: string };
}

/**
 * In a fresh process (the test runner itself keeps async hooks on), with tracing started against a
 * collector in that process and `parentbased_always_off`: new traces are never sampled, a caller's
 * decision is followed. Three operations one after the other, then a promise made after the last, then
 * one made after the sampled span was exported.
 */
function runOperations(): {
  unsampled: Seen;
  sampled: Seen;
  callerUnsampled: Seen;
  after: string[];
  afterExport: { exported: number; symbols: string[]; whileAnswerPending: string[] };
  late: { during: string[]; after: string[] };
  /** `bindToOperation` outside any operation handed the listener back as it was. */
  unbound: boolean;
} {
  const script = `
    const { createServer } = await import('node:http');
    const { startTracing } = await import(${JSON.stringify(START)});
    const telemetry = await import(${JSON.stringify(TELEMETRY)});
    const { context, ROOT_CONTEXT, trace } = await import('@opentelemetry/api');
    let exported = 0;
    const collector = createServer((request, response) => {
      request.resume();
      request.on('end', () => {
        exported++;
        // A busy collector: the answer comes 300 ms later.
        setTimeout(() => response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end(), 300);
      });
    });
    await new Promise((resolve) => collector.listen(0, '127.0.0.1', resolve));
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = 'http://127.0.0.1:' + collector.address().port;
    const tracing = await startTracing({ serviceName: 'test' });
    if (!telemetry.isTracing()) throw new Error('not the module startTracing set');
    const symbols = (promise) => Object.getOwnPropertySymbols(promise).map(String);
    const operation = async (parent) => {
      const span = telemetry.tracer().startSpan('operation', {}, parent);
      return telemetry.runInOperation(parent, span, async () => {
        setTimeout(() => span.end(), 10);
        await new Promise((resolve) => setTimeout(resolve, 5));
        // An emitter's listeners, the event emitted from outside any operation (a socket's data, say).
        const { EventEmitter } = await import('node:events');
        const emitter = new EventEmitter();
        const heard = {};
        emitter.on('event', telemetry.bindToOperation(() => { heard.bound = telemetry.activeTraceparent(); }));
        emitter.on('event', () => { heard.unbound = telemetry.activeTraceparent(); });
        await new Promise((resolve) => telemetry.detached(() => setImmediate(() => { emitter.emit('event'); resolve(); })));
        return {
          listener: { ...heard, own: telemetry.activeTraceparent() },
          symbols: symbols(new Promise(() => {})),
          traceparent: telemetry.activeTraceparent(),
          logFields: telemetry.traceLogFields(),
          active: trace.getActiveSpan() === span,
          spanId: span.spanContext().spanId,
          late: context.bind(context.active(), () => symbols(new Promise(() => {}))),
        };
      });
    };
    const outsideListener = () => {};
    const unbound = telemetry.bindToOperation(outsideListener) === outsideListener;
    const unsampled = await operation(ROOT_CONTEXT);
    const sampled = await operation(telemetry.contextFromTraceparent('00-${CALLER_TRACE_ID}-${CALLER_SPAN_ID}-01'));
    const callerUnsampled = await operation(telemetry.contextFromTraceparent('00-${CALLER_TRACE_ID}-${CALLER_SPAN_ID}-00'));
    await new Promise((resolve) => setImmediate(resolve));
    // A listener bound to the sampled operation's context, called after it ended (a request's late event).
    const late = { during: sampled.late(), after: [] };
    await new Promise((resolve) => setImmediate(resolve));
    late.after = symbols(new Promise(() => {}));
    const after = symbols(new Promise(() => {}));
    // The sampled span ended: the export runs in a context of its own, on for its synchronous part only.
    await new Promise((resolve) => setTimeout(resolve, 50));
    const stopping = tracing.shutdown(10000);
    await new Promise((resolve) => setTimeout(resolve, 150));
    const whileAnswerPending = symbols(new Promise(() => {}));
    await stopping;
    await new Promise((resolve) => setImmediate(resolve));
    const afterExport = { exported, symbols: symbols(new Promise(() => {})), whileAnswerPending };
    process.stdout.write(JSON.stringify({ unsampled, sampled, callerUnsampled, after, afterExport, late, unbound }));
    process.exit(0);
  `;
  return runInFreshProcess(script, { OTEL_TRACES_SAMPLER: 'parentbased_always_off' });
}

describe('the context an operation runs in', () => {
  const { unsampled, sampled, callerUnsampled, after, afterExport, late, unbound } = runOperations();

  it('is none for a new trace the sampler left out: no async hooks, yet a publish stores "not sampled"', () => {
    // Async hooks would give this promise its async ids and the storage's slot.
    expect(unsampled.symbols).toEqual([]);
    expect(unsampled.active).toBe(false);
    expect(unsampled.logFields).toEqual({});
    // A new trace of its own, flagged not sampled: the webhook attempts and fan-out of its event record nothing.
    expect(unsampled.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
    expect(unsampled.traceparent).not.toContain(CALLER_TRACE_ID);
  });

  it('carries a sampled span across awaits, with its ids in the log fields', () => {
    expect(sampled.symbols).toContain('Symbol(kResourceStore)');
    expect(sampled.active).toBe(true);
    expect(sampled.traceparent).toBe(`00-${CALLER_TRACE_ID}-${sampled.spanId}-01`);
    expect(sampled.logFields).toEqual({ trace_id: CALLER_TRACE_ID, span_id: sampled.spanId });
  });

  it("keeps a caller's not-sampled trace for what the operation publishes", () => {
    expect(callerUnsampled.active).toBe(false);
    expect(callerUnsampled.traceparent).toBe(`00-${CALLER_TRACE_ID}-${callerUnsampled.spanId}-00`);
    expect(callerUnsampled.logFields).toEqual({ trace_id: CALLER_TRACE_ID, span_id: callerUnsampled.spanId });
  });

  it("runs a listener bound with bindToOperation in the operation's trace, whoever emits the event", () => {
    for (const seen of [sampled, callerUnsampled]) {
      expect(seen.listener.bound).toBe(seen.listener.own);
      expect(seen.listener.own).toContain(CALLER_TRACE_ID);
      // Not bound, it would publish in a trace of its own.
      expect(seen.listener.unbound).not.toContain(CALLER_TRACE_ID);
    }
    // Outside any operation there is nothing to bind: the listener comes back as it was.
    expect(unbound).toBe(true);
  });

  it('turns the storage, and so async hooks, off again once no operation holds it', () => {
    expect(after).toEqual([]);
  });

  it('keeps it on for the synchronous part only of a call bound to an operation that already ended', () => {
    expect(late.during).toContain('Symbol(kResourceStore)');
    expect(late.after).toEqual([]);
  });

  it('keeps it off while an export waits for the collector, and after it', () => {
    expect(afterExport.exported).toBeGreaterThan(0);
    // Held until the collector answered, every promise made meanwhile would run async hooks.
    expect(afterExport.whileAnswerPending).toEqual([]);
    expect(afterExport.symbols).toEqual([]);
  });
});
