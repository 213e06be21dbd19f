import type { IncomingHttpHeaders, IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { bindToOperation, continueInStorage, currentStretch, inStretch } from '@herald/telemetry';
import type { ExecutionResult, GraphQLError } from 'graphql';
import {
  createGraphQLError,
  type GraphQLParams,
  isAsyncIterable,
  processRegularResult,
  type YogaInitialContext,
  type YogaServerInstance,
} from 'graphql-yoga';
import { LRUCache } from 'lru-cache';
import type { Counter } from 'prom-client';
import type { Context } from './context.js';
import type { Logger } from './logger.js';
import { maskError } from './mask-error.js';
import type { AcceptedQuery, CompiledExecution } from './plugins/use-compiled-execution.js';
import {
  logRequestCompleted,
  REQUEST_ID_HEADER,
  type RequestLog,
  startRequestLog,
} from './plugins/use-request-logging.js';
import { findInvalidTextVariable } from './plugins/use-text-input-guard.js';
import { nameOperationSpan } from './request-tracing.js';
import { releaseScopeCache } from './schema/builder.js';
import { checkOperationQuota } from './tenancy/operation-quota.js';

/**
 * A fast path for the common `POST /graphql` with a JSON body, in front of Yoga (bench/results/http/results.md).
 *
 * Yoga answers every request through the WHATWG fetch model: a `Request` with its own headers object, URL,
 * AbortController and body stream, a chain of promises through every `onRequest`/`onRequestParse`/
 * `onResultProcess`/`onResponse` hook, a `Response` object, and back to node:http. For a small JSON query
 * that machinery costs more CPU than the GraphQL execution and the SQL together. This handler serves the
 * common case straight from node:http and gives everything else to Yoga untouched:
 *
 * - Eligible, decided from the headers before the body is read: `POST` to exactly `/graphql`, a JSON
 *   content type Yoga's JSON parser takes (`application/json`, optionally `; charset=utf-8`), an `Accept`
 *   for which Yoga answers `application/json` (none, `*\/*`, `application/json`, … see `acceptsJson`),
 *   a valid `Content-Length` within MAX_REQUEST_BODY_BYTES, no CORS preflight headers. Anything else
 *   (GET, other paths, chunked bodies, `graphql-response+json`, SSE, multipart, too large…) goes to Yoga
 *   unread.
 * - Then the body is read and parsed: an object with a string `query`, `variables` an object or absent,
 *   `operationName` a string or absent, and nothing else (no `extensions`, no batch). Anything else goes
 *   to Yoga with the body already read (`req.body`, which whatwg-node takes as the request body), so its
 *   answer (400, 415, …) is exactly the one it gives today.
 * - A document Yoga accepted before (parsed, validated with every rule and executed over HTTP: one
 *   query or mutation, see use-compiled-execution.ts) runs compiled, with the context Yoga's `context`
 *   option builds and the same text-input check. Anything refused before execution (a bad token,
 *   variables that don't coerce) goes to the pipeline below, where nothing has run yet either. A result
 *   with errors goes through Yoga's execution hooks once without running again (error codes, error
 *   logging, masking). Route `compiled` in `herald_http_requests_total`. Before it runs, the tenant's
 *   operation quota is checked as `useOperationQuota` checks Yoga's executions (tenancy/operation-quota.ts):
 *   a refusal is answered 429 `RATE_LIMITED` through the same result processor.
 * - Any other document: `yoga.getResultForParams`, Yoga's GraphQL pipeline for these parameters (the
 *   `onParams` hooks, parse and validation caches, graphql-armor limits, introspection policy, context,
 *   execution hooks, graphql-jit), exactly as for a request Yoga parsed itself. Route `pipeline`.
 * - The answer is what Yoga's JSON result processor makes of the result (`processRegularResult` with
 *   `application/json`, the processor Yoga picks for these `Accept` values): without errors, the result
 *   stringified with the same stringifier (graphql-jit's) and status 200; with errors or HTTP extensions,
 *   `processRegularResult` itself (status, `WWW-Authenticate`, `Retry-After`, error formatting). Then the
 *   `x-request-id` header and the access-log line as `useRequestLogging` does, and with an `Origin` the
 *   headers Yoga's default CORS adds. Every request is answered once: nothing falls back after anything
 *   executed, so a mutation never runs twice.
 *
 * What it does not run: Yoga's `onRequest`, `onRequestParse`, `onResultProcess` and `onResponse` hooks.
 * Herald's (request id, metrics, console, readiness, health, CSRF, body limit, CORS, GraphiQL, result
 * processors, subscription refusal) either do nothing for an eligible request or are mirrored above; a
 * new plugin with one of those hooks must be mirrored here too — `http-fast-path.test.ts` compares the two
 * paths on a corpus of requests and is where such a difference shows.
 */
export interface GraphQLFastPathOptions {
  yoga: YogaServerInstance<Record<string, unknown>, Context>;
  /** The GraphQL endpoint, `/graphql`. */
  path: string;
  /** MAX_REQUEST_BODY_BYTES: a longer body goes to Yoga, which answers 413. */
  maxRequestBodyBytes: number;
  logger: Logger;
  /** Error details in masked errors (development), as Yoga's `maskedErrors.isDev`. */
  errorDetails: boolean;
  /** Yoga's `context` option: the fast path builds the very same context for the queries it runs. */
  context: (initial: YogaInitialContext & Record<string, unknown>) => Promise<Context>;
  /** The compiled-execution plugin's register of accepted query documents. */
  compiled: CompiledExecution;
  /** Counted per request by route (`compiled`, `pipeline`, `yoga`); see ApiMetrics.httpRequests. */
  requests: Counter<'route'>;
}

/** The `Content-Type` values whose bodies the fast path parses (Yoga's JSON parser takes them all). */
const JSON_CONTENT_TYPES = new Set([
  'application/json',
  'application/json; charset=utf-8',
  'application/json;charset=utf-8',
]);
/** Distinct `Accept` values whose verdict is remembered (clients send a handful). */
const MAX_REMEMBERED_ACCEPTS = 64;
const CONTENT_LENGTH = /^\d+$/;
const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';
const MASKED_MESSAGE = 'Unexpected error.';

/** The GraphQL request parameters the fast path takes; anything else is Yoga's to answer. */
interface FastParams {
  query: string;
  variables?: Record<string, unknown> | null;
  operationName?: string | null;
}

/**
 * @returns a node:http request listener: the fast path for eligible requests, `yoga` for the rest.
 */
export function createGraphQLFastPath(options: GraphQLFastPathOptions): RequestListener {
  const { yoga, path, maxRequestBodyBytes } = options;
  const toYoga = options.requests.labels('yoga');
  const shared: Shared = {
    options,
    getResultForParams: yoga.getResultForParams,
    logInfo: options.logger.isLevelEnabled('info'),
    compiledRoute: options.requests.labels('compiled'),
    pipelineRoute: options.requests.labels('pipeline'),
  };

  // Yoga's pipeline runs a traced request in the context storage (request-tracing.ts: the fast path's own
  // work carries its operation in stretches).
  const yogaFor = (req: IncomingMessage, res: ServerResponse) => {
    toYoga.inc();
    continueInStorage(res, () => void yoga(req, res));
  };
  return (req, res) => {
    if (!isEligible(req, path, maxRequestBodyBytes)) {
      yogaFor(req, res);
      return;
    }
    const startedAt = performance.now();
    const length = Number(req.headers['content-length']);
    const chunks: Buffer[] = [];
    let received = 0;
    req.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      received += chunk.length;
    });
    req.on('error', () => res.destroy());
    req.on(
      'end',
      bindToOperation(() => {
        const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received);
        const params = received === length ? parseParams(body) : undefined;
        if (params === undefined) {
          // whatwg-node takes a non-empty, async-iterable `req.body` as the body of a consumed request.
          (req as IncomingMessage & { body?: unknown }).body = new ReadBody(body);
          yogaFor(req, res);
          return;
        }
        new FastExchange(shared, req, res, params, startedAt).run();
      }),
    );
  };
}

interface Shared {
  options: GraphQLFastPathOptions;
  getResultForParams: GraphQLFastPathOptions['yoga']['getResultForParams'];
  /** The access log is written at `info` and below (the level is fixed for the process). */
  logInfo: boolean;
  compiledRoute: { inc(): void };
  pipelineRoute: { inc(): void };
}

/** One request the fast path answers: exactly one answer, written once. */
class FastExchange {
  readonly request: NodeRequestView;
  readonly log: RequestLog;
  /**
   * A traced request's operation, while this exchange carries it by hand: a query run by its compiled
   * form whose statements all start in its resolvers' first step (`carriesOperation`), so that every
   * traced call (its quota check, its queries: @herald/db's pool carries it from the checkout) starts in
   * a stretch of it (`inStretch`). Anything else runs in the context storage (`continueInStorage`);
   * untraced, undefined.
   */
  operation = currentStretch();
  /**
   * The traced request's operation for the log lines (their trace ids), whoever carries it: after a
   * hand-over to the storage, code after an `await` of it runs outside it again.
   */
  readonly traced = this.operation;

  constructor(
    readonly shared: Shared,
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    readonly params: FastParams,
    startedAt: number,
  ) {
    this.request = new NodeRequestView(req);
    this.log = startRequestLog(
      this.request,
      this.request.headers.get(REQUEST_ID_HEADER),
      shared.options.logger,
      startedAt,
    );
  }

  run(): void {
    const { params, operation } = this;
    const accepted = this.shared.options.compiled.accepted(params.query, params.operationName);
    const compiled = accepted !== undefined && findInvalidTextVariable(params.variables) === undefined;
    let work: Promise<void>;
    if (operation === undefined || (compiled && accepted.carriesOperation))
      work = compiled ? this.runAccepted(accepted) : this.runThroughYoga();
    else {
      // A mutation stores its trace context after several steps, a nested field may read later, Yoga's
      // pipeline is all promises: the context storage carries the operation through them.
      this.operation = undefined;
      work = continueInStorage(
        this.res,
        () => (compiled ? this.runAccepted(accepted) : this.runThroughYoga()),
        operation,
      );
    }
    work.catch((error: unknown) => this.fail(error));
  }

  /** Yoga's pipeline for these parameters, in the context storage if this exchange carried an operation. */
  throughYoga(): Promise<void> {
    const { operation } = this;
    if (operation === undefined) return this.runThroughYoga();
    this.operation = undefined;
    return continueInStorage(this.res, () => this.runThroughYoga(), operation);
  }

  /**
   * A document Yoga accepted before: the same context, the same text-input check, then its compiled
   * form. Until it runs, anything refused goes to Yoga's pipeline (a bad token, variables that don't
   * coerce: nothing has executed yet). A result with errors goes through Yoga's execution hooks without
   * running again (error codes, error logging, masking: `finish`), then Yoga's result processor.
   */
  async runAccepted(accepted: AcceptedQuery): Promise<void> {
    const { req, res, request, params } = this;
    let context: Context;
    try {
      // The built context holds these initial fields too (it spreads them): no copy back into them.
      context = await this.shared.options.context({ req, res, request, params } as never);
    } catch {
      return this.throughYoga();
    }
    const { operation } = this;
    // Here and below, `operation === undefined ? work : inStretch(operation, () => work)`: an untraced
    // request (all of them with tracing off) makes no closure for a stretch it does not need.
    // The tenant's operation quota, before anything runs (as useOperationQuota does on Yoga's pipeline).
    const refused = await (operation === undefined
      ? checkOperationQuota(context, accepted.document, params.operationName, params.variables)
      : inStretch(operation, () =>
          checkOperationQuota(context, accepted.document, params.operationName, params.variables),
        ));
    if (refused) {
      releaseScopeCache(context);
      this.shared.compiledRoute.inc();
      return this.refuse(refused);
    }
    // Yoga's hooks do not run here: the request span takes the operation's name now (request-tracing.ts).
    if (operation === undefined) nameOperationSpan(accepted.document, params.operationName);
    else inStretch(operation, () => nameOperationSpan(accepted.document, params.operationName));
    let result: ExecutionResult;
    try {
      result = await (operation === undefined
        ? accepted.compiled.query(undefined, context, params.variables)
        : inStretch(operation, () => accepted.compiled.query(undefined, context, params.variables)));
      releaseScopeCache(context);
    } catch (error) {
      releaseScopeCache(context);
      // graphql-jit returns resolver errors; a throw is its own failure: Yoga's catch-all answer.
      this.shared.compiledRoute.inc();
      return this.answer(this.unexpected(error));
    }
    // Variables that don't coerce: refused before any resolver ran (no `data`).
    if (!('data' in result)) return this.throughYoga();
    this.shared.compiledRoute.inc();
    if (!result.errors?.length) {
      const body = accepted.compiled.stringify(result);
      this.finish(200, { 'Content-Type': JSON_CONTENT_TYPE, 'content-length': String(Buffer.byteLength(body)) }, body);
      detachRequest(context);
      return;
    }
    const { yoga, compiled } = this.shared.options;
    compiled.finish(context, Object.assign(result, { stringify: accepted.compiled.stringify }));
    const enveloped = yoga.getEnveloped(context);
    const execute = () =>
      enveloped.execute({
        schema: enveloped.schema,
        document: accepted.document,
        contextValue: context,
        variableValues: params.variables,
        operationName: params.operationName ?? undefined,
      });
    // Yoga's execution hooks (error logging among them) run in the operation's context.
    this.operation = undefined;
    const processed = await continueInStorage(this.res, execute, operation);
    return this.answer(processed as ExecutionResult);
  }

  /** Yoga's GraphQL pipeline for these parameters (everything but its HTTP layer). */
  async runThroughYoga(): Promise<void> {
    this.shared.pipelineRoute.inc();
    let result: Awaited<ReturnType<Shared['getResultForParams']>>;
    try {
      result = await this.shared.getResultForParams(
        { params: this.params as GraphQLParams, request: this.request as unknown as Request },
        { req: this.req, res: this.res },
      );
    } catch (error) {
      result = this.unexpected(error);
    }
    if (result === undefined) result = { errors: [createGraphQLError(MASKED_MESSAGE)] };
    // Only a subscription answers with a stream, and Herald refuses those over HTTP before one exists.
    if (isAsyncIterable(result)) throw new Error('the fast path cannot stream a result');
    return this.answer(result);
  }

  /** Yoga's own catch-all (server.js `handle`): mask, log, answer with the error. */
  unexpected(error: unknown): ExecutionResult {
    const masked = maskError(error, MASKED_MESSAGE, this.shared.options.errorDetails);
    if (masked !== error) {
      const { traced } = this;
      if (traced === undefined) this.log.log.error({ err: error }, 'unexpected error');
      else inStretch(traced, () => this.log.log.error({ err: error }, 'unexpected error'));
    }
    return { errors: [masked as never] };
  }

  /** What Yoga's JSON result processor makes of `result`. */
  async answer(result: ExecutionResult): Promise<void> {
    if (!result.errors?.length && !result.extensions?.http) {
      const stringify = (result as { stringify?: (value: unknown) => string }).stringify ?? JSON.stringify;
      const body = stringify(result);
      this.finish(200, { 'Content-Type': JSON_CONTENT_TYPE, 'content-length': String(Buffer.byteLength(body)) }, body);
      return;
    }
    // Errors: Yoga's own processor decides the status, headers and error formatting.
    const response = processRegularResult(result, this.shared.options.yoga.fetchAPI, 'application/json');
    const body = await response.text();
    const headers: Record<string, string> = {};
    response.headers.forEach((value, name) => {
      headers[name] = value;
    });
    headers['content-length'] = String(Buffer.byteLength(body));
    this.finish(response.status, headers, body);
  }

  /**
   * A quota refusal, answered as Yoga's result processor answers it (its status and headers from
   * `extensions.http`, the error without `http`), written directly: the processor would copy the error
   * into a new GraphQLError with a stack trace, more than half of a refusal's cost in a storm of them.
   * `tenant-quotas.test.ts` compares this answer with the pipeline's.
   */
  refuse(error: GraphQLError): void {
    const { http, ...extensions } = error.extensions as {
      http?: { status?: number; headers?: Record<string, string> };
    };
    const body = JSON.stringify({ errors: [{ message: error.message, extensions }] });
    const headers: Record<string, string> = { 'content-type': JSON_CONTENT_TYPE };
    for (const [name, value] of Object.entries(http?.headers ?? {})) headers[name.toLowerCase()] = value;
    headers['content-length'] = String(Buffer.byteLength(body));
    this.finish(http?.status ?? 200, headers, body);
  }

  finish(status: number, headers: Record<string, string>, body: string): void {
    const { res } = this;
    headers[REQUEST_ID_HEADER] = this.log.requestId;
    const { origin } = this.req.headers;
    if (origin !== undefined) {
      // What Yoga's CORS plugin (whatwg-node useCORS, default options) adds to every answer.
      headers['access-control-allow-origin'] = origin;
      headers.vary = 'Origin';
      headers['access-control-allow-credentials'] = 'true';
    }
    if (!(res.closed || res.destroyed || res.writableEnded)) {
      res.writeHead(status, headers);
      res.end(body);
    }
    if (!this.shared.logInfo) return;
    // The access log line carries the operation's trace ids.
    const { traced } = this;
    if (traced === undefined) logRequestCompleted(this.log, 'POST', this.shared.options.path, status);
    else inStretch(traced, () => logRequestCompleted(this.log, 'POST', this.shared.options.path, status));
  }

  fail(error: unknown): void {
    const { traced } = this;
    if (traced === undefined) this.log.log.error({ err: error }, 'http fast path: could not answer');
    else inStretch(traced, () => this.log.log.error({ err: error }, 'http fast path: could not answer'));
    if (!this.res.headersSent) this.finish(500, { 'content-length': '0' }, '');
    else this.res.destroy();
  }
}

/** Whether the headers alone let the fast path take the request (see {@link createGraphQLFastPath}). */
function isEligible(req: IncomingMessage, path: string, maxBodyBytes: number): boolean {
  if (req.method !== 'POST' || req.url !== path) return false;
  const { headers } = req;
  if (!JSON_CONTENT_TYPES.has(headers['content-type'] as string)) return false;
  if (headers.accept !== undefined && !acceptsJson(headers.accept)) return false;
  if (headers['transfer-encoding'] !== undefined) return false;
  // CORS: Yoga's default (every origin, with credentials) is mirrored in `finish`; preflight-style
  // headers on a POST and an `Origin: *` are left to it.
  if (
    headers.origin === '*' ||
    headers['access-control-request-method'] !== undefined ||
    headers['access-control-request-headers'] !== undefined
  ) {
    return false;
  }
  const contentLength = headers['content-length'];
  return contentLength !== undefined && CONTENT_LENGTH.test(contentLength) && Number(contentLength) <= maxBodyBytes;
}

/**
 * `Accept` value → verdict, least recently used dropped past the bound. A hit costs 13 ns of CPU here
 * against 7 ns on a plain Map (`node --import tsx bench/micro/cache-micro.ts`), once per request of tens of µs.
 */
const acceptVerdicts = new LRUCache<string, boolean>({ max: MAX_REMEMBERED_ACCEPTS });

/**
 * Whether Yoga answers a (non-streamed) result to this `Accept` with `application/json`: its result
 * processors (plugins/use-result-processor.js, result-processor/accept.js) take the media types in the
 * header's order, drop those with a charset other than utf-8, and the JSON processor, listed last, wins
 * with the first type it matches: `application/json` for `*\/*`, `application/*` and `application/json`,
 * `application/graphql-response+json` (other status codes) for that one. A header where only SSE or
 * multipart match is Yoga's too.
 */
function acceptsJson(accept: string): boolean {
  let verdict = acceptVerdicts.get(accept);
  if (verdict === undefined) {
    verdict = false;
    for (const entry of accept.replace(/\s/g, '').toLowerCase().split(',')) {
      const [mediaType, ...parameters] = entry.split(';');
      const charset = parameters.find((parameter) => parameter.includes('charset=')) ?? 'charset=utf-8';
      if (charset !== 'charset=utf-8') continue;
      if (mediaType === 'application/graphql-response+json') break;
      if (mediaType === '*/*' || mediaType === 'application/*' || mediaType === 'application/json') {
        verdict = true;
        break;
      }
    }
    acceptVerdicts.set(accept, verdict);
  }
  return verdict;
}

/** The body as parameters the fast path takes, or undefined for anything Yoga must judge. */
function parseParams(body: Buffer): FastParams | undefined {
  let params: unknown;
  try {
    params = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (params === null || typeof params !== 'object' || Array.isArray(params)) return undefined;
  const { query, variables, operationName } = params as Record<string, unknown>;
  if (typeof query !== 'string') return undefined;
  if (variables != null && (typeof variables !== 'object' || Array.isArray(variables))) return undefined;
  if (operationName != null && typeof operationName !== 'string') return undefined;
  // Yoga ignores parameters that are null; any other one (`extensions`, unknown keys) is Yoga's to judge.
  for (const key in params) {
    const known = key === 'query' || key === 'variables' || key === 'operationName';
    if (!known && (params as Record<string, unknown>)[key] != null) return undefined;
  }
  return params as FastParams;
}

/**
 * What Herald's plugins read of a request during execution (`method`, `url`, `headers.get/has`), over
 * node's own request: a WHATWG `Request` is exactly the cost the fast path avoids. Header values are
 * node's (the object whatwg-node would build its `Headers` from).
 */
class NodeRequestView {
  readonly method = 'POST';
  readonly headers: NodeHeadersView;
  readonly #req: IncomingMessage;

  constructor(req: IncomingMessage) {
    this.#req = req;
    this.headers = new NodeHeadersView(req.headers);
  }

  get url(): string {
    return `http://${this.#req.headers.host ?? 'localhost'}${this.#req.url ?? '/'}`;
  }
}

class NodeHeadersView {
  readonly #headers: IncomingHttpHeaders;

  constructor(headers: IncomingHttpHeaders) {
    this.#headers = headers;
  }

  get(name: string): string | null {
    const value = this.#headers[name.toLowerCase()];
    if (value === undefined) return null;
    return Array.isArray(value) ? value.join(', ') : value;
  }

  has(name: string): boolean {
    return this.#headers[name.toLowerCase()] !== undefined;
  }
}

/**
 * A body the fast path already read, handed to Yoga: whatwg-node takes a non-empty `req.body` that is
 * async-iterable as the request body instead of the (consumed) stream. Not the Buffer itself: whatwg-node
 * tests `Object.keys(body).length`, which for a Buffer lists every byte.
 */
class ReadBody {
  constructor(readonly buffer: Buffer) {}

  async *[Symbol.asyncIterator]() {
    yield this.buffer;
  }
}

/**
 * Once a compiled execution is answered, its context no longer points at the request: `req`, `res`,
 * the request view and the parsed parameters (the body's variables).
 *
 * Measured with `bench/src/http-ab.ts` (a GC profile per trial) under 64 keep-alive clients: every
 * mutation left ~4.7 KB per request in the old generation (`createPost`, `publishPost`; a `posts`
 * query ~40 B): a sampling heap profile of what survived young-generation GCs is the whole request
 * (IncomingMessage, ServerResponse, headers, the variables, the statement's result), reached through
 * the context, while a heap snapshot (a full GC first) holds only the requests in flight. The cause,
 * found by elimination (bench/results/PROFILE.md, "HTTP, third pass"): graphql-jit's serial execution
 * of mutations stores two new closures per request on its execution context (`finalResolve`, `resolve`),
 * which holds this context; with V8's allocation-site pretenuring on, that keeps the graph alive through
 * scavenges (`--no-allocation-site-pretenuring`, or module-level functions in place of the closures,
 * bring it to ~1 KB; queries store none). Cutting the context's links to the request here does the same
 * from our side: promoted bytes ~4.7 → 0.7–1.1 KB per mutation (4.9 → 1.8 KB with `pnpm start`'s smaller
 * young generation), scavenge time per request down by a third to a half (bench/results/PROFILE.md). Nothing runs with
 * this context afterwards: the resolvers are done and the answer is written (a late `context.log` falls
 * back to the root logger).
 */
function detachRequest(context: Context): void {
  // `req`/`res` are the node:http server context Yoga spreads into every context (not in `Context`'s type).
  const detached = context as unknown as Record<'req' | 'res' | 'request' | 'params', unknown>;
  detached.req = undefined;
  detached.res = undefined;
  detached.request = undefined;
  detached.params = undefined;
}
