import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';

/** What the main thread needs of an OTLP trace serializer (`@opentelemetry/otlp-transformer`'s). */
export interface TraceSerializer {
  serializeRequest(spans: ReadableSpan[]): Uint8Array | undefined;
}

export type OtlpHttpProtocol = 'http/protobuf' | 'http/json';

const CONTENT_TYPES: Record<OtlpHttpProtocol, string> = {
  'http/protobuf': 'application/x-protobuf',
  'http/json': 'application/json',
};

/**
 * The worker's source (CommonJS, run with `eval`): the OpenTelemetry OTLP/HTTP export delegate, exactly as
 * the SDK's OTLPTraceExporter builds it (endpoint, headers, timeout, compression, retries and concurrency
 * limit from the `OTEL_EXPORTER_OTLP_*` variables), given requests the main thread already serialized.
 * Source as a string, not a file: it runs the same from the TypeScript sources and from the apps' bundles.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { convertLegacyHttpOptions, createOtlpHttpExportDelegate } = require(workerData.nodeHttp);
const { JsonTraceSerializer, ProtobufTraceSerializer } = require(workerData.transformer);
const responses = workerData.protocol === 'http/json' ? JsonTraceSerializer : ProtobufTraceSerializer;
const delegate = createOtlpHttpExportDelegate(
  convertLegacyHttpOptions({}, 'TRACES', 'v1/traces', { 'Content-Type': workerData.contentType }),
  { serializeRequest: (request) => request.bytes, deserializeResponse: (data) => responses.deserializeResponse(data) },
  'otlp_http_span_exporter',
  { name: 'span', countItems: (request) => request.spans },
);
parentPort.on('message', (message) => {
  if (message.kind === 'export') {
    delegate.export({ bytes: message.bytes, spans: message.spans }, (result) =>
      parentPort.postMessage({
        id: message.id,
        code: result.code,
        error: result.error ? String(result.error.message || result.error) : undefined,
        status: result.error && typeof result.error.code === 'number' ? result.error.code : undefined,
      }),
    );
  } else if (message.kind === 'flush') {
    delegate.forceFlush().then(() => parentPort.postMessage({ id: message.id, code: 0 }), (error) =>
      parentPort.postMessage({ id: message.id, code: 1, error: String(error) }));
  } else if (message.kind === 'shutdown') {
    delegate.shutdown().then(() => parentPort.postMessage({ id: message.id, code: 0 }), (error) =>
      parentPort.postMessage({ id: message.id, code: 1, error: String(error) }));
  }
});
`;

interface Reply {
  id: number;
  code: number;
  error?: string;
  /** The collector's HTTP status, when it answered with an error. */
  status?: number;
}

/** The SDK's export error class (`@opentelemetry/otlp-exporter-base`), so a failure reads as the SDK's own. */
type ExportErrorClass = new (message: string, code?: number) => Error;

/**
 * An OTLP/HTTP span exporter whose HTTP requests are made by a worker thread.
 *
 * Why: node's HTTP and stream code (`Writable.write`, `OutgoingMessage`, the parser's callbacks,
 * `Readable.push`, …) is shared by every HTTP message a thread handles. An API process serves only
 * server requests, so V8 optimises that code for the server's objects alone; the first export made from
 * the main thread sends a client request through the same functions, which throws away their optimised
 * code (48 of them, "wrong map", counted with `--trace-deopt` after one request), and from then on they
 * serve every request less specialised: a lasting few per cent of every request at any sampling ratio
 * above 0 (bench/results/tracing/low-ratio-costs.md). A worker has its own copy of that code.
 *
 * The main thread serializes each batch (the SDK's serializer, pure computation) and hands the bytes over;
 * the worker sends them with the SDK's own delegate. The batch processor above bounds what waits, as
 * before; an export the worker cannot make (it failed to start, or exited) fails, and its spans are
 * counted as dropped like any failed export. The worker is unreferenced: it never keeps a process alive.
 * It costs a process with tracing on one more thread and about 9 MB of resident memory.
 */
export function threadedOtlpExporter(
  protocol: OtlpHttpProtocol,
  serializer: TraceSerializer,
  ExportError: ExportErrorClass,
): SpanExporter {
  const resolve = createRequire(import.meta.url).resolve;
  const workerData = {
    protocol,
    contentType: CONTENT_TYPES[protocol],
    nodeHttp: resolve('@opentelemetry/otlp-exporter-base/node-http'),
    transformer: resolve('@opentelemetry/otlp-transformer'),
  };
  const waiting = new Map<number, (reply: Reply) => void>();
  let nextId = 0;
  let worker: Worker | undefined;
  let gone: string | undefined;

  const failAll = (reason: string) => {
    gone = reason;
    worker = undefined;
    for (const [id, settle] of waiting) settle({ id, code: 1, error: reason });
    waiting.clear();
  };
  const start = (): Worker => {
    // No inherited flags: the worker needs no TypeScript loader or diagnostics of the app's. A small young
    // generation keeps the thread at about 9 MB of resident memory (a serialized batch is well under 1 MB);
    // a thread that runs out of heap exits, and the next export starts another.
    const started = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData,
      execArgv: [],
      resourceLimits: { maxYoungGenerationSizeMb: 2, maxOldGenerationSizeMb: 64 },
    });
    started.on('message', (reply: Reply) => {
      const settle = waiting.get(reply.id);
      waiting.delete(reply.id);
      settle?.(reply);
    });
    started.on('error', (error) => failAll(`trace export thread failed: ${error.message}`));
    started.on('exit', (code) => failAll(`trace export thread exited (${code})`));
    started.unref();
    return started;
  };
  const ask = (message: Record<string, unknown>): Promise<Reply> =>
    new Promise((settle) => {
      // A thread that ended is started again on the next request: one broken export loses one batch.
      if (!worker) {
        gone = undefined;
        worker = start();
      }
      const id = nextId++;
      waiting.set(id, settle);
      worker.postMessage({ ...message, id });
    });

  // Started now, not at the first export: the thread's own objects (a worker, its ports and stdio streams)
  // are new shapes to node's event and stream code too, and met before the app's first requests they are
  // part of what V8 optimises that code for, instead of a change to it mid-traffic.
  worker = start();

  return {
    export(spans: ReadableSpan[], done: (result: ExportResult) => void) {
      let bytes: Uint8Array | undefined;
      try {
        bytes = serializer.serializeRequest(spans);
      } catch (error) {
        done({ code: 1, error: error instanceof Error ? error : new Error(String(error)) });
        return;
      }
      if (!bytes) {
        done({ code: 1, error: new Error('Nothing to send') });
        return;
      }
      void ask({ kind: 'export', bytes, spans: spans.length }).then((reply) =>
        done(
          reply.code === 0
            ? { code: 0 }
            : { code: 1, error: new ExportError(reply.error ?? gone ?? 'export failed', reply.status) },
        ),
      );
    },
    async forceFlush() {
      if (worker) await ask({ kind: 'flush' });
    },
    async shutdown() {
      const running = worker;
      if (!running) return;
      await ask({ kind: 'shutdown' });
      running.removeAllListeners('exit');
      await running.terminate();
      worker = undefined;
    },
  };
}
