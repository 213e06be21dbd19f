import { ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import {
  activeTraceparent,
  contextFromTraceparent,
  formatTraceparent,
  isTracing,
  parseTraceparent,
  traceLogMixin,
} from './trace-context.js';

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const SPAN_ID = 'b7ad6b7169203331';
const TRACEPARENT = `00-${TRACE_ID}-${SPAN_ID}-01`;

describe('trace context helpers', () => {
  it('round-trips a W3C traceparent, sampled or not', () => {
    expect(parseTraceparent(TRACEPARENT)).toEqual({
      traceId: TRACE_ID,
      spanId: SPAN_ID,
      traceFlags: 1,
      isRemote: true,
    });
    expect(formatTraceparent(parseTraceparent(TRACEPARENT)!)).toBe(TRACEPARENT);
    const unsampled = `00-${TRACE_ID}-${SPAN_ID}-00`;
    expect(formatTraceparent(parseTraceparent(unsampled)!)).toBe(unsampled);
  });

  it('treats a missing or malformed stored value as no parent: a new trace, never an error', () => {
    for (const bad of [
      null,
      undefined,
      '',
      'garbage',
      `01-${TRACE_ID}-${SPAN_ID}-01`,
      `00-${'0'.repeat(32)}-${SPAN_ID}-01`,
      `00-${TRACE_ID}-${'0'.repeat(16)}-01`,
      `00-${TRACE_ID.toUpperCase()}-${SPAN_ID}-01`,
      `${TRACEPARENT}-extra`,
    ]) {
      expect(parseTraceparent(bad)).toBeUndefined();
      expect(contextFromTraceparent(bad)).toBe(ROOT_CONTEXT);
    }
  });

  it('puts a stored traceparent in a context as the remote parent', () => {
    const parent = trace.getSpanContext(contextFromTraceparent(TRACEPARENT));
    expect(parent).toEqual({ traceId: TRACE_ID, spanId: SPAN_ID, traceFlags: 1, isRemote: true });
  });

  it('costs nothing while tracing is off: no traceparent, no log mixin', () => {
    expect(isTracing()).toBe(false);
    expect(activeTraceparent()).toBeNull();
    expect(traceLogMixin()).toBeUndefined();
  });
});
