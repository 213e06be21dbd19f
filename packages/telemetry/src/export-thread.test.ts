import { describe, expect, it } from 'vitest';
import { runInFreshProcess, START, TELEMETRY } from './fresh-process.test-support.js';

interface Seen {
  /** HTTP client requests the main thread started (node's `http.client.request.start` channel). */
  mainThreadClientRequests: number;
  received: { path: string; contentType: string; bytes: number; names: string[] }[];
  dropped: number;
}

/**
 * A fresh process with a collector of its own: starts tracing at `protocol`, ends three spans, stops
 * (which exports them), and reports what the collector got and what the main thread did meanwhile.
 */
function exportThreeSpans(protocol: 'http/protobuf' | 'http/json', status = 200): Seen {
  return runInFreshProcess<Seen>(
    `
    import dc from 'node:diagnostics_channel';
    import { createServer } from 'node:http';
    let mainThreadClientRequests = 0;
    dc.subscribe('http.client.request.start', () => mainThreadClientRequests++);
    const received = [];
    const collector = createServer((request, response) => {
      const chunks = [];
      request.on('data', (chunk) => chunks.push(chunk));
      request.on('end', () => {
        const body = Buffer.concat(chunks);
        const names = request.headers['content-type'] === 'application/json'
          ? JSON.parse(body.toString()).resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans.map((span) => span.name)))
          : [];
        received.push({ path: request.url, contentType: request.headers['content-type'], bytes: body.length, names });
        response.writeHead(${status}, { 'content-type': request.headers['content-type'] }).end();
      });
    });
    await new Promise((resolve) => collector.listen(0, '127.0.0.1', resolve));
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = 'http://127.0.0.1:' + collector.address().port;
    const { startTracing } = await import(${JSON.stringify(START)});
    const { tracer } = await import(${JSON.stringify(TELEMETRY)});
    const tracing = await startTracing({ serviceName: 'export-thread-check' });
    for (const name of ['first', 'second', 'third']) tracer().startSpan(name).end();
    await tracing.shutdown(10_000);
    collector.close();
    process.stdout.write(JSON.stringify({ mainThreadClientRequests, received, dropped: tracing.dropped() }));
    `,
    { OTEL_EXPORTER_OTLP_PROTOCOL: protocol, OTEL_TRACES_SAMPLER: 'always_on' },
  );
}

describe('the span exporter’s thread', () => {
  it('sends OTLP/JSON to the collector while the main thread makes no HTTP client request', () => {
    const seen = exportThreeSpans('http/json');
    expect(seen.received).toHaveLength(1);
    expect(seen.received[0]).toMatchObject({ path: '/v1/traces', contentType: 'application/json' });
    expect(seen.received[0]?.names.sort()).toEqual(['first', 'second', 'third']);
    expect(seen.mainThreadClientRequests).toBe(0);
    expect(seen.dropped).toBe(0);
  });

  it('sends OTLP/protobuf the same way', () => {
    const seen = exportThreeSpans('http/protobuf');
    expect(seen.received).toHaveLength(1);
    expect(seen.received[0]).toMatchObject({ path: '/v1/traces', contentType: 'application/x-protobuf' });
    expect(seen.received[0]?.bytes).toBeGreaterThan(50);
    expect(seen.mainThreadClientRequests).toBe(0);
  });

  it('counts the spans of an export the collector refused as dropped', () => {
    const seen = exportThreeSpans('http/json', 400);
    expect(seen.received).toHaveLength(1);
    expect(seen.dropped).toBe(3);
    expect(seen.mainThreadClientRequests).toBe(0);
  });
});
