import { describe, expect, it } from 'vitest';
import { runInFreshProcess, START, TELEMETRY } from './fresh-process.test-support.js';
import { samplerFollowsParent } from './start-tracing.js';

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const SPAN_ID = 'b7ad6b7169203331';
const UNSAMPLED = `00-${TRACE_ID}-${SPAN_ID}-00`;
const SAMPLED = `00-${TRACE_ID}-${SPAN_ID}-01`;
/** Unsampled, but with ids the SDK takes for no parent at all: a new trace, which the sampler decides. */
const ZERO_IDS = [`00-${'0'.repeat(32)}-${SPAN_ID}-00`, `00-${TRACE_ID}-${'0'.repeat(16)}-00`];

interface Seen {
  /** `unsampledParent` for the unsampled, sampled and malformed parent, and unsampled ones with a zero id. */
  skips: boolean[];
  /** `unsampledChildTraceparent` for the same three, twice for the unsampled one. */
  children: [string | null, string | null, string | null, string | null];
  /** Whether the SDK's own span under the unsampled parent records: what skipping it must agree with. */
  sdkRecordsUnderUnsampled: boolean;
  /** The spans exported (OTLP/JSON to a collector in the process): names and the trace ids they link to. */
  exported: { name: string; links: string[] }[];
}

/**
 * In a fresh process (tracing is process-wide), tracing started with `sampler` and `ratio`, exporting
 * OTLP/JSON to a collector in that process. After the helpers are asked, two batch spans are recorded: one
 * for a batch holding a sampled event, one for a batch of unsampled events only.
 */
function underSampler(sampler: string | undefined, ratio = '1'): Seen {
  const script = `
    const { createServer } = await import('node:http');
    const { startTracing } = await import(${JSON.stringify(START)});
    const telemetry = await import(${JSON.stringify(TELEMETRY)});
    const exported = [];
    const collector = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk) => { body += chunk; });
      request.on('end', () => {
        for (const resource of JSON.parse(body).resourceSpans ?? [])
          for (const scope of resource.scopeSpans ?? [])
            for (const span of scope.spans ?? [])
              exported.push({ name: span.name, links: (span.links ?? []).map((link) => link.traceId) });
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise((resolve) => collector.listen(0, '127.0.0.1', resolve));
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = 'http://127.0.0.1:' + collector.address().port;
    const tracing = await startTracing({ serviceName: 'test' });
    const parents = [${JSON.stringify(UNSAMPLED)}, ${JSON.stringify(SAMPLED)}, 'garbage'];
    const seen = {
      skips: [...parents, ...${JSON.stringify(ZERO_IDS)}].map((parent) => telemetry.unsampledParent(parent)),
      children: [...parents, parents[0]].map((parent) => telemetry.unsampledChildTraceparent(parent) ?? null),
      sdkRecordsUnderUnsampled: telemetry
        .tracer()
        .startSpan('x', {}, telemetry.contextFromTraceparent(parents[0]))
        .isRecording(),
    };
    telemetry.recordBatchSpan('batch with a sampled event', Date.now(), [parents[0], parents[1], null, 'garbage'], {});
    telemetry.recordBatchSpan('batch of unsampled events', Date.now(), [parents[0], null], {});
    await tracing.shutdown(10000);
    seen.exported = exported;
    process.stdout.write(JSON.stringify(seen));
    process.exit(0);
  `;
  return runInFreshProcess(script, {
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    ...(sampler ? { OTEL_TRACES_SAMPLER: sampler, OTEL_TRACES_SAMPLER_ARG: ratio } : {}),
  });
}

describe('spans under a parent that said "not sampled"', () => {
  it('are skipped under a parent-based sampler: the same trace goes on, with a new span id, still not sampled', () => {
    for (const sampler of ['parentbased_traceidratio', undefined]) {
      const seen = underSampler(sampler);
      // What the SDK itself would do: its span under that parent records nothing.
      expect(seen.sdkRecordsUnderUnsampled).toBe(false);
      expect(seen.skips).toEqual([true, false, false, false, false]);
      const [first, sampled, malformed, second] = seen.children;
      expect(first).toMatch(new RegExp(`^00-${TRACE_ID}-[0-9a-f]{16}-00$`));
      expect(first).not.toContain(SPAN_ID);
      expect(second).not.toBe(first);
      // A sampled or malformed parent: the SDK makes the span.
      expect(sampled).toBeNull();
      expect(malformed).toBeNull();
    }
  });

  it('are left to the SDK under a sampler that decides alone, which may record them', () => {
    const seen = underSampler('always_on');
    expect(seen.sdkRecordsUnderUnsampled).toBe(true);
    expect(seen.skips).toEqual([false, false, false, false, false]);
    expect(seen.children).toEqual([null, null, null, null]);
  });

  it('make a batch span only for a batch holding a sampled event, recorded for it under a parent-based sampler', () => {
    // Ratio 0: a new trace is never sampled, unless its links lead to a sampled one.
    expect(underSampler('parentbased_traceidratio', '0').exported).toEqual([
      { name: 'batch with a sampled event', links: [TRACE_ID] },
    ]);
    expect(underSampler('always_on').exported).toEqual([{ name: 'batch with a sampled event', links: [TRACE_ID] }]);
    // A sampler that ignores parents ignores links too: at ratio 0 nothing is recorded.
    expect(underSampler('traceidratio', '0').exported).toEqual([]);
  });

  it('reads the sampler as the SDK does: unset or unknown is its parent-based default', () => {
    expect(samplerFollowsParent(undefined)).toBe(true);
    expect(samplerFollowsParent('parentbased_always_off')).toBe(true);
    expect(samplerFollowsParent('something_else')).toBe(true);
    for (const alone of ['always_on', 'always_off', 'traceidratio', ' traceidratio ']) {
      expect(samplerFollowsParent(alone)).toBe(false);
    }
  });
});
