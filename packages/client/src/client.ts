import { type Client, createClient, type FormattedExecutionResult, type Sink } from 'graphql-ws';
import { RECONNECT_BASE_MS, RECONNECT_MAX_MS, reconnectDelayMs } from './backoff.js';
import { type CursorPlace, isAfter, readCursor } from './cursor.js';
import { type ResumableRequest, resumableRequest } from './resumable-document.js';

/** `extensions.code` of a refused `after` cursor (docs/subscriptions.md). */
export const CURSOR_EXPIRED = 'CURSOR_EXPIRED';
/** `extensions.code` of a subscription the server ended because its event source failed. */
export const SUBSCRIPTION_INTERRUPTED = 'SUBSCRIPTION_INTERRUPTED';
/**
 * `extensions.code` of a resume whose history could not be read now (Redis unreachable or too slow),
 * before or during the replay: the cursor is still good, so the subscription is sent again with it.
 */
export const HISTORY_UNAVAILABLE = 'HISTORY_UNAVAILABLE';
/**
 * `extensions.code` of an operation refused by a tenant quota: `extensions.retryAfterMs` says when to
 * try again. The subscription is sent again after that wait (plus jitter), with its cursor.
 */
export const RATE_LIMITED = 'RATE_LIMITED';
/** Asks for an organisation's current cursor (see {@link SubscribeRequest.startAtHead}). */
export const HEAD_QUERY = 'query HeraldHead($orgId: ID!) { postPublishedCursor(orgId: $orgId) }';
/** Codes after which a subscription is sent again, with its last cursor, after a jittered backoff. */
const RETRYABLE_CODES: ReadonlySet<string> = new Set([SUBSCRIPTION_INTERRUPTED, HISTORY_UNAVAILABLE, RATE_LIMITED]);

export { AFTER_VARIABLE } from './resumable-document.js';

export interface HeraldClientOptions {
  /** The WebSocket URL of Herald's GraphQL endpoint, e.g. `wss://herald.example.com/graphql`. */
  url: string;
  /**
   * Returns the bearer token. Called on every connect and reconnect (never a stale token): after the
   * server closes with 4403 (token expired or refused), the next attempt asks again. A throw or
   * rejection counts as a failed attempt and is retried with backoff.
   */
  token: () => string | Promise<string>;
  /** A WebSocket implementation for Node (`ws`). @default globalThis.WebSocket */
  webSocketImpl?: unknown;
  /**
   * Called when the server can't resume a subscription from its last cursor (CURSOR_EXPIRED: events
   * were missed for good). Reconcile here, e.g. with a `posts` query; the library then subscribes
   * again without a cursor. A throw is reported to the subscription's `error`.
   */
  onCursorExpired?: (subscription: { query: string; variables: Record<string, unknown> }) => void | Promise<void>;
  /** Reconnect delays: full jitter up to `min(maxMs, baseMs · 2^attempt)`. @default 500 / 30000 */
  reconnect?: { baseMs?: number; maxMs?: number };
  /** Called on every successful (re)connect, with whether it was a reconnect. For metrics and tests. */
  onConnected?: (reconnected: boolean) => void;
  /**
   * Called when a subscription is sent again after SUBSCRIPTION_INTERRUPTED, HISTORY_UNAVAILABLE or
   * RATE_LIMITED (with the code and the delay before it). For metrics and tests.
   */
  onRetry?: (code: string, delayMs: number) => void;
  /**
   * How often to ping the server (a graphql-ws `ping` message); a server that does not answer within
   * `pongTimeoutMs` is taken for gone: the socket is dropped and the library reconnects (through the
   * load balancer, to a live pod) and resumes. Without this, a pod that hangs (a frozen process, a
   * stalled network path) keeps its sockets open and its subscribers wait forever. 0 turns it off.
   * @default 10000
   */
  keepAliveMs?: number;
  /** How long to wait for the `pong` of a ping. @default 5000 */
  pongTimeoutMs?: number;
  /**
   * How long a connection attempt may wait for the server's `connection_ack` before it is abandoned and
   * retried (with backoff). A load balancer may route a reconnect to a pod that accepts the TCP connection
   * but never answers (a frozen process); without a bound that attempt waits forever. 0 turns it off.
   * @default 10000
   */
  connectTimeoutMs?: number;
}

export interface SubscribeRequest {
  /**
   * A subscription document. Any `postPublished` document resumes: one that passes a variable to
   * `after` (`postPublished(orgId: $orgId, after: $cursor)`) has that variable kept current; to one
   * without, the library adds `$after: String` and the argument itself. A document it can't make
   * resumable (two `postPublished` fields, the field inside a fragment, a syntax error) is refused at
   * once through `sink.error`, code `BAD_SUBSCRIPTION_DOCUMENT`.
   */
  query: string;
  variables?: Record<string, unknown>;
  operationName?: string;
  /**
   * Without a cursor: first ask the server for the current cursor of the subscription's organisation
   * (`postPublishedCursor(orgId:)`, the field's `orgId` argument or variable) and subscribe after it, so
   * that a connection dropped before the first event still resumes without missing anything.
   */
  startAtHead?: boolean;
}

export interface HeraldClient {
  /**
   * Subscribes; `sink.next` gets each event once, in order, across reconnects. `sink.error` gets
   * errors the server won't recover from (FORBIDDEN, a bad document); `sink.complete` a normal end.
   * @returns a function that ends the subscription
   */
  subscribe<Data = Record<string, unknown>>(
    request: SubscribeRequest,
    sink: Sink<FormattedExecutionResult<Data, unknown>>,
  ): () => void;
  /** Ends every subscription and closes the socket. */
  dispose(): Promise<void>;
  /** The underlying graphql-ws client. */
  readonly graphqlWs: Client;
}

/**
 * A Herald client over the graphql-ws client. Each subscription remembers the cursor of
 * the last event it delivered (`payload.extensions.cursor`) and sends it as `after` whenever
 * graphql-ws subscribes again (after a 1012 pod restart, a 1013, a 4403 with a fresh token, a network
 * drop), so the server replays what was missed; events at or before that cursor are dropped.
 */
export function createHeraldClient(options: HeraldClientOptions): HeraldClient {
  const baseMs = options.reconnect?.baseMs ?? RECONNECT_BASE_MS;
  const maxMs = options.reconnect?.maxMs ?? RECONNECT_MAX_MS;
  let connections = 0;
  const keepAliveMs = options.keepAliveMs ?? KEEP_ALIVE_MS;
  const pongTimeoutMs = options.pongTimeoutMs ?? PONG_TIMEOUT_MS;
  let socket: unknown;
  let pongTimer: ReturnType<typeof setTimeout> | undefined;
  const connectTimeoutMs = options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS;
  let connectTimer: ReturnType<typeof setTimeout> | undefined;
  const graphqlWs = createClient({
    url: options.url,
    webSocketImpl: withAbortListener(options.webSocketImpl),
    // Asked on every connect: a reconnect after 4403 gets a new token.
    connectionParams: async () => ({ authToken: await options.token() }),
    lazy: true,
    retryAttempts: Number.POSITIVE_INFINITY,
    // 1012/1013/4403/network drops are retried; graphql-ws itself gives up on protocol errors (4400, …).
    shouldRetry: () => true,
    retryWait: (retries) => new Promise((resolve) => setTimeout(resolve, reconnectDelayMs(retries, baseMs, maxMs))),
    keepAlive: keepAliveMs,
    on: {
      // Bounds the whole attempt, upgrade included: graphql-ws's own ack timeout starts only once the
      // socket is open, and a proxied upgrade to a frozen pod never opens. terminate() abandons the
      // attempt and counts as a drop, so the next one (with backoff) may reach a live pod.
      connecting: () => {
        clearTimeout(connectTimer);
        if (connectTimeoutMs > 0) connectTimer = setTimeout(() => graphqlWs.terminate(), connectTimeoutMs);
      },
      connected: (connected) => {
        clearTimeout(connectTimer);
        socket = connected;
        connections += 1;
        options.onConnected?.(connections > 1);
      },
      ping: (received) => {
        if (received) return; // the server's ping: graphql-ws answers it
        clearTimeout(pongTimer);
        const pinged = socket;
        // No pong in time: graphql-ws's terminate() ends this socket at once, without a close handshake
        // (which a hung server would never finish), and counts as a drop: it reconnects and resumes.
        pongTimer = setTimeout(() => {
          if (socket === pinged) graphqlWs.terminate();
        }, pongTimeoutMs);
      },
      pong: (received) => {
        if (received) clearTimeout(pongTimer);
      },
      closed: () => {
        clearTimeout(pongTimer);
        clearTimeout(connectTimer);
      },
    },
  });

  const active = new Set<() => void>();

  function subscribe<Data>(request: SubscribeRequest, sink: Sink<FormattedExecutionResult<Data, unknown>>): () => void {
    let resumable: ResumableRequest;
    try {
      resumable = resumableRequest(request.query, request.variables, request.operationName);
    } catch (refusal) {
      sink.error(refusal);
      return () => {};
    }
    // graphql-ws re-sends this same payload object on every resubscribe: the cursor is kept current in it.
    const { variables, cursorVariable } = resumable;
    const payload = { query: resumable.query, variables, operationName: request.operationName };
    let last: CursorPlace | undefined;
    let ended = false;
    let release: (() => void) | undefined;
    let retryTimer: ReturnType<typeof setTimeout> | undefined;
    let interruptions = 0;

    const end = () => {
      ended = true;
      clearTimeout(retryTimer);
      release?.();
      active.delete(stop);
    };
    const stop = () => end();

    const start = () => {
      if (ended) return;
      release = graphqlWs.subscribe<Data>(payload, {
        next(result) {
          const cursor = (result.extensions as { cursor?: unknown } | undefined)?.cursor;
          if (typeof cursor === 'string' && cursorVariable !== undefined) {
            const place = readCursor(cursor);
            if (!isAfter(place, last)) return; // delivered before a reconnect
            last = place;
            variables[cursorVariable] = cursor;
          }
          interruptions = 0;
          sink.next(result);
        },
        error(error) {
          if (ended) return;
          const code = errorCode(error);
          if (code === CURSOR_EXPIRED) {
            if (cursorVariable !== undefined) delete variables[cursorVariable];
            last = undefined;
            Promise.resolve(options.onCursorExpired?.({ query: request.query, variables: { ...variables } })).then(
              start,
              (failure: unknown) => {
                end();
                sink.error(failure);
              },
            );
            return;
          }
          if (code !== undefined && RETRYABLE_CODES.has(code)) {
            // Same cursor (`variables.after` is kept): the server replays from where this left off.
            const delayMs = retryDelayMs(error, interruptions++, baseMs, maxMs);
            options.onRetry?.(code, delayMs);
            retryTimer = setTimeout(start, delayMs);
            return;
          }
          end();
          sink.error(error);
        },
        complete() {
          if (ended) return;
          end();
          sink.complete();
        },
      });
    };
    /** Asks for the head cursor, then starts; retried like the subscription itself. */
    const startAtHead = () => {
      if (ended) return;
      let cursor: unknown;
      let errors: readonly unknown[] | undefined;
      const retryOrFail = (error: unknown) => {
        const code = errorCode(error);
        if (code !== undefined && RETRYABLE_CODES.has(code)) {
          const delayMs = retryDelayMs(error, interruptions++, baseMs, maxMs);
          options.onRetry?.(code, delayMs);
          retryTimer = setTimeout(startAtHead, delayMs);
          return;
        }
        end();
        sink.error(error);
      };
      release = graphqlWs.subscribe<{ postPublishedCursor: string | null }>(
        { query: HEAD_QUERY, variables: { orgId: resumable.orgId } },
        {
          next(result) {
            errors = result.errors;
            cursor = result.data?.postPublishedCursor;
          },
          error(error) {
            if (!ended) retryOrFail(error);
          },
          complete() {
            if (ended) return;
            if (errors && errors.length > 0) return retryOrFail(errors);
            if (typeof cursor === 'string' && cursorVariable !== undefined) {
              variables[cursorVariable] = cursor;
              last = readCursor(cursor);
            }
            start();
          },
        },
      );
    };
    active.add(stop);
    if (request.startAtHead && cursorVariable !== undefined && variables[cursorVariable] == null) startAtHead();
    else start();
    return stop;
  }

  return {
    subscribe,
    async dispose() {
      for (const stop of [...active]) stop();
      // graphql-ws 6 rejects dispose() with whatever ended the connection attempt it was in when
      // disposed: the close event ("All Subscriptions Gone" after the last release), or the socket's
      // error event when that attempt failed to connect (a server that is gone). Either way the
      // connection is gone, which is what disposing asks for. Anything else is a real failure.
      await Promise.resolve(graphqlWs.dispose()).catch((error: unknown) => {
        if (!isCloseEvent(error) && !isErrorEvent(error)) throw error;
      });
    },
    graphqlWs,
  };
}

/** Default ping interval and pong wait: a hung server is left within 15 s. */
export const KEEP_ALIVE_MS = 10_000;
export const PONG_TIMEOUT_MS = 5_000;
export const CONNECT_TIMEOUT_MS = 10_000;
/**
 * `ws` (Node) emits `error` when a socket still connecting is closed, and an `error` event without a
 * listener throws. graphql-ws removes its listener when it abandons an attempt (the connect timeout
 * above): this adds one that stays, so an abandoned attempt can't end the process. Browsers' sockets
 * are EventTargets, where an unheard event is harmless: they are used as they are.
 */
function withAbortListener(impl: unknown): unknown {
  if (typeof impl !== 'function') return impl;
  const Base = impl as new (...args: unknown[]) => { on?: (event: string, listener: () => void) => unknown };
  return class extends Base {
    constructor(...args: unknown[]) {
      super(...args);
      this.on?.('error', () => {});
    }
  };
}

/** A WebSocket close event (or graphql-ws's stand-in for one): `{ code, reason }`. */
function isCloseEvent(value: unknown): boolean {
  return typeof value === 'object' && value !== null && 'code' in value && 'reason' in value;
}

/** A WebSocket `error` event (`ws`'s ErrorEvent, or the DOM's): the socket failed, e.g. could not connect. */
function isErrorEvent(value: unknown): boolean {
  return typeof value === 'object' && value !== null && (value as { type?: unknown }).type === 'error';
}

/**
 * How long to wait before sending a refused subscription again: a RATE_LIMITED refusal's
 * `retryAfterMs` plus up to `baseMs` of jitter (so the refused clients of one organisation don't all
 * come back in the same millisecond), else the jittered exponential backoff.
 */
export function retryDelayMs(
  error: unknown,
  attempt: number,
  baseMs = RECONNECT_BASE_MS,
  maxMs = RECONNECT_MAX_MS,
  random: () => number = Math.random,
): number {
  const retryAfterMs = errorExtension(error, 'retryAfterMs');
  if (errorCode(error) === RATE_LIMITED && typeof retryAfterMs === 'number' && retryAfterMs >= 0) {
    return Math.min(maxMs, Math.ceil(retryAfterMs) + Math.floor(random() * baseMs));
  }
  return reconnectDelayMs(attempt, baseMs, maxMs, random);
}

function errorExtension(error: unknown, name: string): unknown {
  if (!Array.isArray(error)) return undefined;
  for (const item of error) {
    const extensions = (item as { extensions?: Record<string, unknown> } | null)?.extensions;
    if (extensions && name in extensions) return extensions[name];
  }
  return undefined;
}

/** The `extensions.code` of a graphql-ws `error` (an array of GraphQL errors), if any. */
function errorCode(error: unknown): string | undefined {
  if (!Array.isArray(error)) return undefined;
  for (const item of error) {
    const code = (item as { extensions?: { code?: unknown } } | null)?.extensions?.code;
    if (typeof code === 'string') return code;
  }
  return undefined;
}
