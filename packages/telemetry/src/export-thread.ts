import { createRequire } from 'node:module';
import { Worker, type WorkerOptions } from 'node:worker_threads';
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
 * limit from the OTLP exporter variables, `OTEL_EXPORTER_OTLP_ENDPOINT` and the rest), given requests the
 * main thread already serialized.
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

interface Thread {
  worker: Worker;
  waiting: Map<number, (reply: Reply) => void>;
  dead: boolean;
}

const RESTART_MIN_MS = 1_000;
const RESTART_MAX_MS = 60_000;

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
 * before; an export the thread cannot make (it could not start, or it died) fails, and its spans are
 * counted as dropped like any failed export; a thread that died is replaced by a later export, no sooner
 * than a second after (doubling to a minute while they keep dying). The thread keeps a process alive only
 * while a request waits on it.
 * It costs a process with tracing on one more thread and about 9 MB of resident memory.
 */
export function threadedOtlpExporter(
  protocol: OtlpHttpProtocol,
  serializer: TraceSerializer,
  ExportError: ExportErrorClass,
  testing: {
    /** The thread's code instead of the OTLP delegate's. */
    source?: string;
    /** Makes the worker (by default `new Worker`): to make it fail. */
    spawn?: (source: string, options: WorkerOptions) => Worker;
  } = {},
): SpanExporter {
  const source = testing.source ?? WORKER_SOURCE;
  const spawn = testing.spawn ?? ((code: string, options: WorkerOptions) => new Worker(code, options));
  const resolve = createRequire(import.meta.url).resolve;
  const workerData = {
    protocol,
    contentType: CONTENT_TYPES[protocol],
    nodeHttp: resolve('@opentelemetry/otlp-exporter-base/node-http'),
    transformer: resolve('@opentelemetry/otlp-transformer'),
  };
  let nextId = 0;
  /** The running thread and the requests waiting on it: each thread's own, so a dead one fails only its own. */
  let current: Thread | undefined;
  let closed = false;
  /** After a thread dies, no new one before this time (doubling from 1 s to a minute while they keep dying). */
  let restartAt = 0;
  let restartDelayMs = 0;

  const died = (thread: Thread, reason: string) => {
    if (thread.dead) return;
    thread.dead = true;
    if (current === thread) {
      current = undefined;
      restartDelayMs = Math.min(Math.max(2 * restartDelayMs, RESTART_MIN_MS), RESTART_MAX_MS);
      restartAt = Date.now() + restartDelayMs;
    }
    for (const [id, settle] of thread.waiting) settle({ id, code: 1, error: reason });
    thread.waiting.clear();
  };
  const start = (): Thread => {
    // No inherited flags: the worker needs no TypeScript loader or diagnostics of the app's. A small young
    // generation keeps the thread at about 9 MB of resident memory (a serialized batch is well under 1 MB);
    // a thread that runs out of heap exits, and a later export starts another.
    const worker = spawn(source, {
      eval: true,
      workerData,
      execArgv: [],
      resourceLimits: { maxYoungGenerationSizeMb: 2, maxOldGenerationSizeMb: 64 },
    });
    const thread: Thread = { worker, waiting: new Map(), dead: false };
    worker.on('message', (reply: Reply) => {
      const settle = thread.waiting.get(reply.id);
      thread.waiting.delete(reply.id);
      if (thread.waiting.size === 0) worker.unref();
      if (reply.code === 0) restartDelayMs = 0;
      settle?.(reply);
    });
    worker.on('error', (error) => died(thread, `trace export thread failed: ${error.message}`));
    worker.on('exit', (code) => died(thread, `trace export thread exited (${code})`));
    worker.unref();
    return thread;
  };
  /** The running thread, or a new one; undefined with the reason when there is none to be had now. */
  const running = (): Thread | string => {
    if (closed) return 'the trace exporter is shut down';
    if (current) return current;
    if (Date.now() < restartAt) return 'trace export thread restarting';
    try {
      current = start();
      return current;
    } catch (error) {
      // The OS can refuse a thread (ERR_WORKER_INIT_FAILED): this batch fails, a later one tries again.
      restartDelayMs = Math.min(Math.max(2 * restartDelayMs, RESTART_MIN_MS), RESTART_MAX_MS);
      restartAt = Date.now() + restartDelayMs;
      return `trace export thread could not start: ${error instanceof Error ? error.message : String(error)}`;
    }
  };
  /** Sends `message` to the thread and resolves with its reply; never rejects. */
  const ask = (message: Record<string, unknown>, thread: Thread | string = running()): Promise<Reply> =>
    new Promise((settle) => {
      const id = nextId++;
      if (typeof thread === 'string' || thread.dead) {
        settle({ id, code: 1, error: typeof thread === 'string' ? thread : 'trace export thread exited' });
        return;
      }
      // Referenced while a request waits on it (the caller waits for the answer), unreferenced otherwise.
      if (thread.waiting.size === 0) thread.worker.ref();
      thread.waiting.set(id, settle);
      thread.worker.postMessage({ ...message, id });
    });

  // Started now, not at the first export: the thread's own objects (a worker, its ports and stdio streams)
  // are new shapes to node's event and stream code too, and met before the app's first requests they are
  // part of what V8 optimises that code for, instead of a change to it mid-traffic. If the OS refuses the
  // thread, the first export tries again.
  running();

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
            : { code: 1, error: new ExportError(reply.error ?? 'export failed', reply.status) },
        ),
      );
    },
    async forceFlush() {
      if (current) await ask({ kind: 'flush' }, current);
    },
    async shutdown() {
      closed = true;
      const thread = current;
      current = undefined;
      if (!thread) return;
      await ask({ kind: 'shutdown' }, thread);
      await thread.worker.terminate();
      died(thread, 'the trace exporter is shut down');
    },
  };
}
