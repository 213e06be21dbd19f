import type { Server } from 'node:http';
import { AuthUnavailableError, isMemberOf, type TokenVerifier, type Viewer } from '@herald/auth';
import { ErrorCode } from '@herald/contracts';
import type { Span } from '@opentelemetry/api';
import { type DocumentNode, type ExecutionResult, type execute, GraphQLError, Kind, type subscribe } from 'graphql';
import { CloseCode } from 'graphql-ws';
import { isAsyncIterable, type YogaServerInstance } from 'graphql-yoga';
import { WebSocketServer } from 'ws';
import { type Context, readConnectionToken } from '../context.js';
import type { Logger } from '../logger.js';
import type { ApiMetrics } from '../metrics.js';
import { documentError, GRAPHQL_PARSE_FAILED, GRAPHQL_VALIDATION_FAILED } from '../plugins/use-error-codes.js';
import { namedOrganization, selectedOperation } from '../tenancy/operation-org.js';
import type { TenantQuotas } from '../tenancy/tenant-quotas.js';
import { type ConnectionExtra, HeraldSocket, serveGraphQLWs } from './graphql-ws-adapter.js';
import { runInSocketOperationSpan, startSocketOperationSpan } from './operation-span.js';
import { createSubscriptionGroups, type GroupMember, SLOW_CONSUMER_CLOSE_CODE } from './subscription-groups.js';

/** A client that doesn't send `connection_init` within this is closed with 4408. */
export const CONNECTION_INIT_TIMEOUT_MS = 3_000;
/** Largest WebSocket message accepted; a larger one closes the socket with 1009. */
export const MAX_WS_MESSAGE_BYTES = 1024 * 1024;
/** Subscriptions per socket; the next subscribe gets an error and the socket stays up. */
export const MAX_SUBSCRIPTIONS_PER_SOCKET = 50;
/** Close code for a graceful shutdown: "Service Restart", so clients reconnect to another pod. */
export const SERVICE_RESTART_CLOSE_CODE = 1012;
/** A socket with more than this waiting in its send buffer when an event is due is closed (1013). */
export const MAX_BUFFERED_BYTES = 512 * 1024;
/** The token could not be checked (key source down): "Try Again Later", so the client backs off. */
export const AUTH_UNAVAILABLE_CLOSE_CODE = 1013;
/** A user over their `socketsPerUser` quota: "Try Again Later", after `connection_init`. */
export const SOCKET_LIMIT_CLOSE_CODE = 1013;
/** Node's timers overflow past this (about 24.8 days); longer token lifetimes are re-armed. */
const MAX_TIMER_MS = 2_147_483_647;

/** Yoga's enveloped execute/subscribe, carried to graphql-ws's execute/subscribe in the root value. */
interface EnvelopedRoot {
  execute: typeof execute;
  subscribe: typeof subscribe;
  /** Set when this subscription may share execution with identical ones (see subscription-groups.ts). */
  share?: { key: string; member: GroupMember; resuming: boolean };
  /** The organisation whose `subscriptions` quota counts this subscription until it ends. */
  countedOrg?: string;
  /** With tracing on: the operation's span (operation-span.ts), ended once it ran or its stream opened. */
  span?: Span;
}

export interface WebSocketDeps {
  httpServer: Server;
  yoga: YogaServerInstance<Record<string, unknown>, Context>;
  verifier: TokenVerifier;
  logger: Logger;
  metrics: ApiMetrics;
  path: string;
  keepAliveMs: number;
  /** Share one execution per event among subscriptions whose results cannot differ. @default true */
  sharedExecution: boolean;
  /** Tenant quotas: sockets per user at `connection_init`, operations and subscriptions at subscribe. */
  quotas: TenantQuotas;
}

export interface HeraldWebSocketServer {
  /** Closes every socket with 1012 and stops accepting upgrades; resolves once they are closed. */
  close(): Promise<void>;
  /** Drops every socket at once (end of the shutdown grace period). */
  terminate(): void;
  /**
   * Closes up to `count` open sockets with 1012 "Service Restart" (rebalancing: clients reconnect through
   * the load balancer, to a less loaded pod). Returns how many it closed.
   */
  shed(count: number): number;
  /** Sockets currently open. */
  readonly size: number;
  /** Groups of subscriptions currently sharing execution. */
  readonly sharedGroups: number;
  /** Shared-execution frames written straight to the TCP socket (ws-direct-frames.ts): read by tests. */
  readonly directFrames: number;
}

/**
 * graphql-ws (`graphql-transport-ws`) on the HTTP server's port and path. Operations run through
 * Yoga's envelop, so the same plugins, limits and error masking apply as over HTTP.
 *
 * - Auth happens once, at `connection_init` (`authToken`, or `authorization: "Bearer …"`), with the
 *   same verifier as HTTP. A bad token closes the socket with 4403; no token means anonymous. At the
 *   token's `exp` the socket is closed with 4403 "Forbidden: token expired". For GraphiQL's sake, an
 *   anonymous socket may carry credentials per operation in `extensions.headers` (see
 *   `authenticateOperation`).
 * - The legacy `graphql-ws` sub-protocol (subscriptions-transport-ws) gets 4406.
 * - Keep-alive: a ping every `keepAliveMs`; a socket that doesn't pong within it is dropped.
 */
export function createWebSocketServer(deps: WebSocketDeps): HeraldWebSocketServer {
  const { yoga, verifier, logger, metrics } = deps;
  const groups = createSubscriptionGroups({
    schema: yoga.getEnveloped().schema,
    metrics,
    maxBufferedBytes: MAX_BUFFERED_BYTES,
    logger,
  });
  // Herald's own socket class carries the per-socket state (graphql-ws-adapter.ts).
  const wss = new WebSocketServer({
    server: deps.httpServer,
    path: deps.path,
    maxPayload: MAX_WS_MESSAGE_BYTES,
    WebSocket: HeraldSocket,
  });

  wss.on('connection', () => metrics.openSockets.inc());

  const decrementActive = () => metrics.activeSubscriptions.dec();

  const server = serveGraphQLWs<Record<string, unknown>>(
    {
      connectionInitWaitTimeout: CONNECTION_INIT_TIMEOUT_MS,
      async onConnect(ctx) {
        const state = ctx.extra;
        let token: string | undefined;
        try {
          token = readConnectionToken(ctx.connectionParams);
        } catch {
          return false;
        }
        // The token is read: the `connection_init` payload (the token itself) is not kept for the socket's life.
        (ctx as { connectionParams?: unknown }).connectionParams = undefined;
        if (token === undefined) {
          state.viewer = null;
          return true;
        }
        try {
          state.viewer = await verifier.verify(token);
        } catch (error) {
          if (error instanceof AuthUnavailableError) {
            // Closed first, so graphql-ws's own 4403 for `false` finds the socket closing and is dropped.
            state.socket.close(AUTH_UNAVAILABLE_CLOSE_CODE, 'Try Again Later: authentication unavailable');
          }
          return false; // graphql-ws closes with 4403 Forbidden
        }
        // A socket closed meanwhile is not counted: its close already ran.
        if (state.socket.readyState !== state.socket.OPEN) return false;
        if (!(await deps.quotas.openSocket(state.viewer))) {
          state.socket.close(SOCKET_LIMIT_CLOSE_CODE, 'Try Again Later: too many sockets open for this user');
          return false;
        }
        state.countedViewer = state.viewer;
        if (state.socket.readyState !== state.socket.OPEN) {
          // Closed while being counted: onClose found nothing to release.
          state.countedViewer = undefined;
          deps.quotas.closeSocket(state.viewer);
          return false;
        }
        scheduleExpiry(state, state.viewer.expiresAt);
        return true;
      },
      async onSubscribe(ctx, id, payload) {
        // graphql-ws has already registered this id, so the count includes the one being subscribed.
        if (Object.keys(ctx.subscriptions).length > MAX_SUBSCRIPTIONS_PER_SOCKET) {
          return [
            new GraphQLError(`Too many subscriptions on this socket: at most ${MAX_SUBSCRIPTIONS_PER_SOCKET}`, {
              extensions: { code: ErrorCode.SUBSCRIPTION_LIMIT_EXCEEDED, limit: 'subscriptionsPerSocket' },
            }),
          ];
        }
        const state = ctx.extra;
        let viewer = state.viewer ?? null;
        if (viewer === null) {
          const operationAuth = await authenticateOperation(payload.extensions);
          if (operationAuth instanceof GraphQLError) return [operationAuth];
          if (operationAuth) {
            viewer = operationAuth;
            scheduleExpiry(state, viewer.expiresAt);
          }
        }
        const { schema, execute, subscribe, contextFactory, parse, validate } = yoga.getEnveloped({
          ...ctx,
          socketViewer: viewer,
          transport: 'websocket',
          params: payload,
        });
        // A refused document is an `error` message with a code, never a 4500 close.
        let document: ReturnType<typeof parse>;
        let errors: readonly GraphQLError[];
        try {
          document = parse(payload.query);
        } catch (error) {
          return [documentError(error, GRAPHQL_PARSE_FAILED)];
        }
        try {
          errors = validate(schema, document);
        } catch (error) {
          return [documentError(error, GRAPHQL_VALIDATION_FAILED)];
        }
        if (errors.length > 0) return errors;
        // Tenant quotas (docs/tenancy.md), refused as an `error` message with the socket kept open.
        const named = namedOrganization(document, payload.operationName, payload.variables);
        if (viewer !== null) {
          const refused = await deps.quotas.checkOperation(viewer, named);
          if (refused) return [socketError(refused)];
        }
        const resume = resumeArgument(document, payload.variables);
        const shareKey = deps.sharedExecution
          ? groups.keyFor(document, payload.operationName, payload.query, resume.keyVariables)
          : undefined;
        const rootValue: EnvelopedRoot = {
          execute,
          subscribe,
          ...(shareKey
            ? { share: { key: shareKey, member: { socket: ctx.extra.socket, id }, resuming: resume.resuming } }
            : {}),
        };
        const contextValue = await contextFactory();
        // Counted last, once nothing before `subscribe` can fail: `subscribe` releases it.
        if (
          named !== undefined &&
          isMemberOf(viewer, named) &&
          selectedOperation(document, payload.operationName)?.operation === 'subscription'
        ) {
          const refused = await deps.quotas.openSubscription(named);
          if (refused) return [refused];
          rootValue.countedOrg = named;
        }
        // Tracing on: the operation's span, a child of `extensions.traceparent` when the caller sent one.
        rootValue.span = startSocketOperationSpan(payload.extensions, document, payload.operationName);
        return {
          schema,
          document,
          operationName: payload.operationName,
          variableValues: payload.variables,
          contextValue,
          rootValue,
        };
      },
      execute: (args) => {
        const root = args.rootValue as EnvelopedRoot;
        return root.span ? runInSocketOperationSpan(root.span, true, () => root.execute(args)) : root.execute(args);
      },
      subscribe: async (args) => {
        const root = args.rootValue as EnvelopedRoot;
        const context = args.contextValue as Context;
        const countedOrg = root.countedOrg;
        // The real subscribe runs for every subscriber, so authorization is never shared.
        let result: Awaited<ReturnType<typeof root.subscribe>>;
        try {
          result = await (root.span
            ? runInSocketOperationSpan(root.span, false, () => root.subscribe(args))
            : root.subscribe(args));
        } catch (error) {
          if (countedOrg !== undefined) deps.quotas.closeSubscription(countedOrg);
          throw error;
        }
        if (!isAsyncIterable(result)) {
          if (countedOrg !== undefined) deps.quotas.closeSubscription(countedOrg);
          return refusalAsError(result);
        }
        metrics.activeSubscriptions.inc();
        const ended =
          countedOrg === undefined
            ? decrementActive
            : () => {
                decrementActive();
                deps.quotas.closeSubscription(countedOrg);
              };
        const withCursor = withCursors(result, context);
        if (!root.share) return onEnd(withCursor, ended);
        // The member reports its own end: no EndWatcher (and its per-`next` closures) around it.
        const stream = groups.join(root.share.key, root.share.member, withCursor, context, root.share.resuming, ended);
        if (!root.share.resuming) {
          // graphql-ws keeps these args until the subscription ends, but a grouped member that is not
          // catching up never executes: the group runs on its first member's context. Dropping this
          // member's context frees it and what hangs off it (Pothos' per-request auth caches, scope
          // loaders): ~3 KB per subscribed socket (bench/results/PROFILE.md).
          args.contextValue = undefined;
          args.rootValue = undefined;
        }
        return stream;
      },
      onNext(ctx, _id, _payload, args) {
        const { socket } = ctx.extra;
        if (socket.bufferedAmount > MAX_BUFFERED_BYTES) {
          metrics.slowConsumersClosed.inc();
          socket.close(SLOW_CONSUMER_CLOSE_CODE, 'Try Again Later: too slow to keep up');
          return;
        }
        metrics.eventsDelivered.inc();
        const event = (args.contextValue as Context | undefined)?.event;
        if (event) metrics.eventToSendSeconds.observe((Date.now() - event.emittedAt) / 1000);
        if (event?.replayed) metrics.eventsReplayed.inc();
      },
      onError(_ctx, _id, _payload, errors) {
        logger.debug({ errors: errors.map((error) => error.message) }, 'subscribe refused');
      },
    },
    wss,
    {
      keepAliveMs: deps.keepAliveMs,
      logger,
      onClose(extra) {
        metrics.openSockets.dec();
        clearTimeout(extra.expiryTimer);
        if (extra.countedViewer) {
          deps.quotas.closeSocket(extra.countedViewer);
          extra.countedViewer = undefined;
        }
      },
    },
  );

  /**
   * Credentials sent with one operation rather than at `connection_init`: Yoga's GraphiQL puts its
   * Headers tab into each subscribe message as `extensions.headers` and never into `connection_init`.
   * Only consulted for a socket that authenticated nobody at `connection_init`; verified exactly like
   * connection credentials, and the socket is closed at that token's expiry as well.
   * @returns the viewer, undefined when the operation carries no credentials, or the error to answer with
   */
  async function authenticateOperation(extensions: unknown): Promise<Viewer | GraphQLError | undefined> {
    const headers = (extensions as { headers?: unknown } | null | undefined)?.headers;
    if (headers == null || typeof headers !== 'object') return undefined;
    try {
      const token = readConnectionToken(headers as Record<string, unknown>);
      return token === undefined ? undefined : await verifier.verify(token);
    } catch (error) {
      if (error instanceof AuthUnavailableError) {
        return new GraphQLError('Authentication is temporarily unavailable: retry later with the same token', {
          extensions: { code: ErrorCode.AUTH_UNAVAILABLE },
        });
      }
      return new GraphQLError('Invalid, expired or malformed token in the operation headers', {
        extensions: { code: 'UNAUTHENTICATED' },
      });
    }
  }

  return {
    async close() {
      const sockets = [...wss.clients];
      const allClosed = Promise.all(
        sockets.map((socket) =>
          socket.readyState === socket.CLOSED ? undefined : new Promise((resolve) => socket.once('close', resolve)),
        ),
      );
      for (const socket of sockets) socket.close(SERVICE_RESTART_CLOSE_CODE, 'Service Restart');
      await allClosed;
      await server.dispose();
    },
    terminate() {
      for (const socket of wss.clients) socket.terminate();
    },
    shed(count) {
      let closed = 0;
      for (const socket of wss.clients) {
        if (closed >= count) break;
        if (socket.readyState !== socket.OPEN) continue;
        socket.close(SERVICE_RESTART_CLOSE_CODE, 'Service Restart: rebalancing');
        closed++;
      }
      return closed;
    },
    get size() {
      return wss.clients.size;
    },
    get sharedGroups() {
      return groups.size;
    },
    get directFrames() {
      return groups.directFrames;
    },
  };
}

/**
 * A refusal as graphql-ws sends it: the same code and extensions as over HTTP, without the HTTP status
 * and headers (meaningless on a socket).
 */
function socketError(error: GraphQLError): GraphQLError {
  const { http: _http, ...extensions } = error.extensions;
  return new GraphQLError(error.message, { extensions });
}

/**
 * Closes the socket with 4403 at `expiresAt` (Unix seconds), or at an earlier expiry already set. The
 * timer calls a module function with arguments rather than a closure per socket.
 */
function scheduleExpiry(state: ConnectionExtra, expiresAt: number | undefined) {
  if (expiresAt === undefined) return;
  if (state.expiresAt !== undefined && state.expiresAt <= expiresAt) return;
  state.expiresAt = expiresAt;
  clearTimeout(state.expiryTimer);
  const remainingMs = expiresAt * 1000 - Date.now();
  if (remainingMs <= 0) {
    state.socket.close(CloseCode.Forbidden, 'Forbidden: token expired');
    return;
  }
  state.expiryTimer = setTimeout(onExpiryTimer, Math.min(remainingMs, MAX_TIMER_MS), state, expiresAt);
  state.expiryTimer.unref();
}

/** The expiry timer fired: closes the socket, or re-arms a timer capped at Node's maximum. */
function onExpiryTimer(state: ConnectionExtra, expiresAt: number) {
  if (expiresAt * 1000 - Date.now() > 0) {
    state.expiresAt = undefined;
    scheduleExpiry(state, expiresAt);
  } else state.socket.close(CloseCode.Forbidden, 'Forbidden: token expired');
}

/**
 * A subscription refused before its stream existed. graphql-ws would send that as `next` + `complete`;
 * a refused cursor, or a history that can't be read now, must be an `error` message (docs/subscriptions.md) so
 * clients don't take it for a normal end, so it becomes a stream that fails at once (graphql-ws
 * answers with `error`, keeping the code).
 */
function refusalAsError(result: ExecutionResult): ExecutionResult | AsyncIterableIterator<ExecutionResult> {
  const expired = result.errors?.find(
    (error) =>
      error.extensions?.code === ErrorCode.CURSOR_EXPIRED || error.extensions?.code === ErrorCode.HISTORY_UNAVAILABLE,
  );
  if (!expired) return result;
  const failing: AsyncIterableIterator<ExecutionResult> = {
    [Symbol.asyncIterator]: () => failing,
    next: () => Promise.reject(expired),
    return: async () => ({ done: true, value: undefined }),
  };
  return failing;
}

/**
 * Adds `extensions.cursor` (docs/subscriptions.md) to each result: the resolver leaves the event's cursor on the
 * context while executing it. A plain iterator, so `return()` is immediate (see {@link onEnd}), and a
 * class, so a subscription holds no closures for it (bench/results/PROFILE.md).
 */
function withCursors(stream: AsyncIterable<ExecutionResult>, context: Context): AsyncIterableIterator<ExecutionResult> {
  return new CursorStream(stream[Symbol.asyncIterator](), context);
}

class CursorStream implements AsyncIterableIterator<ExecutionResult> {
  constructor(
    private readonly iterator: AsyncIterator<ExecutionResult>,
    private readonly context: Context,
  ) {}

  [Symbol.asyncIterator]() {
    return this;
  }

  async next(): Promise<IteratorResult<ExecutionResult>> {
    const result = await this.iterator.next();
    const cursor = this.context.event?.cursor;
    if (result.done || cursor === undefined) return result;
    return { done: false, value: { ...result.value, extensions: { ...result.value.extensions, cursor } } };
  }

  async return(value?: unknown): Promise<IteratorResult<ExecutionResult>> {
    return this.iterator.return ? this.iterator.return(value) : { done: true, value: value as ExecutionResult };
  }

  async throw(error?: unknown): Promise<IteratorResult<ExecutionResult>> {
    if (this.iterator.throw) return this.iterator.throw(error);
    throw error;
  }
}

/**
 * Whether the subscription resumes (`after` set on its root field), and the variables that identify
 * its shared group: without the cursor, so resuming subscribers end up in the same group.
 */
export function resumeArgument(
  document: DocumentNode,
  variables: Record<string, unknown> | null | undefined,
): { resuming: boolean; keyVariables: Record<string, unknown> | null | undefined } {
  for (const definition of document.definitions) {
    if (definition.kind !== Kind.OPERATION_DEFINITION || definition.operation !== 'subscription') continue;
    for (const selection of definition.selectionSet.selections) {
      if (selection.kind !== Kind.FIELD) continue;
      const after = selection.arguments?.find((argument) => argument.name.value === 'after');
      if (!after) continue;
      if (after.value.kind === Kind.VARIABLE) {
        const name = after.value.name.value;
        const value = variables?.[name];
        const { [name]: _cursor, ...rest } = variables ?? {};
        return { resuming: value != null, keyVariables: rest };
      }
      return { resuming: after.value.kind !== Kind.NULL, keyVariables: variables };
    }
  }
  return { resuming: false, keyVariables: variables };
}

/**
 * Calls `onEndOnce` when the stream ends for any reason (done, error, or `return()` from the client's
 * `complete` or a closed socket). A plain iterator rather than an async generator: a generator's
 * `return()` would wait for the pending `next()`, i.e. for the next event. A class with a non-async
 * `next`, so an idle subscription holds no suspended async function (see bench/results/PROFILE.md).
 */
function onEnd<T>(iterable: AsyncIterable<T>, onEndOnce: () => void): AsyncIterableIterator<T> {
  return new EndWatcher(iterable[Symbol.asyncIterator](), onEndOnce);
}

class EndWatcher<T> implements AsyncIterableIterator<T> {
  private ended = false;

  constructor(
    private readonly iterator: AsyncIterator<T>,
    private readonly onEndOnce: () => void,
  ) {}

  [Symbol.asyncIterator]() {
    return this;
  }

  next(): Promise<IteratorResult<T>> {
    return this.iterator.next().then(
      (result) => {
        if (result.done) this.end();
        return result;
      },
      (error: unknown) => {
        this.end();
        throw error;
      },
    );
  }

  async return(value?: unknown): Promise<IteratorResult<T>> {
    this.end();
    return this.iterator.return ? this.iterator.return(value) : { done: true, value: value as T };
  }

  async throw(error?: unknown): Promise<IteratorResult<T>> {
    this.end();
    if (this.iterator.throw) return this.iterator.throw(error);
    throw error;
  }

  private end() {
    if (!this.ended) {
      this.ended = true;
      this.onEndOnce();
    }
  }
}
