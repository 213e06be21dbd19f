import { Worker } from 'node:worker_threads';
import type { ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import { threadedOtlpExporter } from './export-thread.js';
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

describe('the span exporter’s thread, when it dies or cannot start', () => {
  /** A stand-in thread: answers every export at once, and exits when an export carries 13 spans. */
  const STAND_IN = `
    const { parentPort } = require('node:worker_threads');
    parentPort.on('message', (message) => {
      if (message.spans === 13) process.exit(1);
      parentPort.postMessage({ id: message.id, code: 0 });
    });
  `;
  const serializer = { serializeRequest: (spans: ReadableSpan[]) => new Uint8Array(spans.length + 1) };
  const spans = (count: number) => Array.from({ length: count }, () => ({}) as ReadableSpan);
  const exportOf = (exporter: SpanExporter, count: number) =>
    new Promise<ExportResult>((resolve) => exporter.export(spans(count), resolve));

  it('fails the export a dying thread held, refuses a second of a restart, then starts another', async () => {
    const exporter = threadedOtlpExporter('http/json', serializer, Error, { source: STAND_IN });
    try {
      expect((await exportOf(exporter, 1)).code).toBe(0);
      const lost = await exportOf(exporter, 13);
      expect(lost.code).toBe(1);
      expect(String(lost.error)).toContain('exited');
      // No new thread within the first second after a death: failed at once.
      const soon = await exportOf(exporter, 1);
      expect(String(soon.error)).toContain('restarting');
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      expect((await exportOf(exporter, 1)).code).toBe(0);
    } finally {
      await exporter.shutdown();
    }
  });

  it('fails an export, without throwing, when the OS refuses a thread; a later one starts it', async () => {
    let refuse = true;
    const exporter = threadedOtlpExporter('http/json', serializer, Error, {
      source: STAND_IN,
      spawn: (code, options) => {
        if (refuse) throw new Error('ERR_WORKER_INIT_FAILED: EAGAIN');
        return new Worker(code, options);
      },
    });
    try {
      const refused = await exportOf(exporter, 1);
      expect(refused.code).toBe(1);
      expect(String(refused.error)).toMatch(/could not start|restarting/);
      refuse = false;
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      expect((await exportOf(exporter, 1)).code).toBe(0);
    } finally {
      await exporter.shutdown();
    }
  });

  it('fails exports after shutdown at once, and starts no thread for them', async () => {
    let started = 0;
    const exporter = threadedOtlpExporter('http/json', serializer, Error, {
      source: STAND_IN,
      spawn: (code, options) => {
        started += 1;
        return new Worker(code, options);
      },
    });
    expect((await exportOf(exporter, 1)).code).toBe(0);
    await exporter.shutdown();
    const after = await exportOf(exporter, 1);
    expect(String(after.error)).toContain('shut down');
    expect(started).toBe(1);
  });
});
