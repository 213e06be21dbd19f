import type { Viewer } from '@herald/auth';
import { CloseCode, type ConnectionInitMessage, handleProtocols, makeServer, type ServerOptions } from 'graphql-ws';
import { WebSocket, type WebSocketServer } from 'ws';
import type { Logger } from '../logger.js';

/**
 * graphql-ws's protocol (its `makeServer` state machine: messages, close codes, hooks) on a `ws` server,
 * in place of graphql-ws's own `useServer` adapter (graphql-ws/use/ws), which costs ~1.5 KB per socket
 * at 10k sockets (bench/results/PROFILE.md). Same behaviour, fewer per-socket objects:
 *
 * - One object per socket ({@link Connection}) is graphql-ws's socket, its `extra` and Herald's socket
 *   state; `ws` events reach it through listeners shared by every socket (`this` is the socket), where
 *   `useServer` made seven closures and two `once` wrappers per socket.
 * - Keep-alive: one timer per server visits the sockets in {@link KEEP_ALIVE_SLOTS} slices; each socket is
 *   pinged every `keepAliveMs` and terminated when its pong has not arrived by its next visit
 *   (`keepAliveMs` later) — `useServer`'s rule, without an interval timer per socket and a timer and a
 *   `once('pong')` listener per ping.
 * - `connection_init` deadline: a timer per socket until `connection_init` arrives, then released
 *   (graphql-ws keeps its fired timer for the socket's life).
 * - A message is handed over as a string and the Buffer dropped: `useServer` kept each subscribe
 *   message's Buffer in a suspended async function until the subscription ended.
 *
 * The HTTP upgrade request is not kept (Herald reads credentials from `connection_init` only).
 */

/**
 * Close codes graphql-ws's server sends on our sockets by itself (not through our code): a message that is
 * not graphql-transport-ws, a `subscribe` before `connection_ack`, a socket without the
 * graphql-transport-ws sub-protocol (the legacy `graphql-ws` one included), no `connection_init` in time, a
 * second `subscribe` with an id in use, a second `connection_init`. Listed so the error reference in docs/
 * cannot leave one out (docs/build/error-reference.ts reads them from here).
 */
export const GRAPHQL_WS_SENT_CLOSE_CODES = [
  CloseCode.BadRequest,
  CloseCode.Unauthorized,
  CloseCode.SubprotocolNotAcceptable,
  CloseCode.ConnectionInitialisationTimeout,
  CloseCode.SubscriberAlreadyExists,
  CloseCode.TooManyInitialisationRequests,
] as const;

/**
 * Keep-alive visits per interval: each visit pings (or drops) the sockets that connected during one
 * 1/N of an interval, so pings go out in small bursts (at 12 s and 10k sockets connected evenly: ~600 every
 * 750 ms) rather than all at once.
 */
export const KEEP_ALIVE_SLOTS = 16;

/** What graphql-ws's hooks get as `ctx.extra`, and what Herald keeps per socket. */
export interface ConnectionExtra {
  readonly socket: WebSocket;
  /** Set once at `connection_init`; null for an anonymous socket. */
  viewer: Viewer | null | undefined;
  /** Closes the socket at the token's expiry (ws-admission.ts). */
  expiryTimer: NodeJS.Timeout | undefined;
  /** The earliest token expiry on this socket (Unix seconds). */
  expiresAt: number | undefined;
  /** The viewer whose `socketsPerUser` quota counts this socket, released when it closes. */
  countedViewer: Viewer | undefined;
}

/** A `ws` socket of this server: carries its connection (a declared field, so no map lookup per event). */
export class HeraldSocket extends WebSocket {
  connection: Connection | undefined = undefined;
}

type MessageHandler = (data: string) => Promise<void>;
type ClosedHandler = (code?: number, reason?: string) => Promise<void>;

/** Everything one socket costs beyond `ws` itself: graphql-ws's socket and `extra`, Herald's state. */
class Connection implements ConnectionExtra {
  viewer: Viewer | null | undefined = undefined;
  expiryTimer: NodeJS.Timeout | undefined = undefined;
  expiresAt: number | undefined = undefined;
  countedViewer: Viewer | undefined = undefined;
  /** graphql-ws's message handler and what to call on close. */
  handler: MessageHandler | undefined = undefined;
  closed: ClosedHandler | undefined = undefined;
  /** Until `connection_init` arrived. */
  initTimer: NodeJS.Timeout | undefined = undefined;
  /** Pinged at the last keep-alive visit and no pong since. */
  awaitingPong = false;

  constructor(
    readonly socket: HeraldSocket,
    /** The keep-alive slice that visits this socket. */
    readonly slot: number,
    readonly adapter: Adapter,
  ) {}

  get protocol(): string {
    return this.socket.protocol;
  }

  /** Resolves once written (graphql-ws waits on it); a socket that is no longer open drops the message. */
  send(data: string): Promise<void> {
    const socket = this.socket;
    if (socket.readyState !== WebSocket.OPEN) return Promise.resolve();
    return new Promise((resolve, reject) => {
      socket.send(data, (error) => (error ? reject(error) : resolve()));
    });
  }

  close(code?: number, reason?: string) {
    this.socket.close(code, reason);
  }

  onMessage(handler: MessageHandler) {
    this.handler = handler;
  }
}

/** State shared by every socket of one server (one object, not a closure per socket). */
interface Adapter {
  logger: Logger;
  /** Called once per socket when it closes, after graphql-ws's own clean-up started. */
  onClose: (extra: ConnectionExtra) => void;
}

export interface GraphQLWsAdapter {
  /** Closes every socket with 1001, stops keep-alive and the `ws` server. */
  dispose(): Promise<void>;
}

/**
 * Serves graphql-transport-ws on `wss` (created with `WebSocket: HeraldSocket`) with graphql-ws's
 * `makeServer(options)`. `options.connectionInitWaitTimeout` is enforced here; `keepAliveMs` ≤ 0 or
 * infinite turns keep-alive pings off.
 */
export function serveGraphQLWs<P extends ConnectionInitMessage['payload']>(
  options: ServerOptions<P, ConnectionExtra>,
  wss: WebSocketServer,
  deps: { keepAliveMs: number; logger: Logger; onClose?: (extra: ConnectionExtra) => void },
): GraphQLWsAdapter {
  const { connectionInitWaitTimeout = 3_000, onConnect } = options;
  const server = makeServer<P, ConnectionExtra>({
    ...options,
    connectionInitWaitTimeout: 0,
    onConnect(ctx) {
      releaseInitTimer(ctx.extra as Connection);
      return onConnect?.(ctx);
    },
  });
  const adapter: Adapter = { logger: deps.logger, onClose: deps.onClose ?? (() => {}) };
  wss.options.handleProtocols = handleProtocols;

  wss.once('error', (error) => {
    deps.logger.error({ err: error }, 'websocket server error: closing every socket');
    for (const socket of wss.clients) socket.close(CloseCode.InternalServerError, 'Internal server error');
  });

  let nextSlot = 0;
  wss.on('connection', (socket: HeraldSocket) => {
    // The slice visited last: the first ping comes about one interval after connecting, as with useServer.
    const connection = new Connection(socket, (nextSlot + KEEP_ALIVE_SLOTS - 1) % KEEP_ALIVE_SLOTS, adapter);
    socket.connection = connection;
    socket.on('error', onSocketError);
    socket.on('message', onSocketMessage);
    socket.on('pong', onSocketPong);
    socket.on('close', onSocketClose);
    if (connectionInitWaitTimeout > 0 && Number.isFinite(connectionInitWaitTimeout)) {
      connection.initTimer = setTimeout(onInitTimeout, connectionInitWaitTimeout, connection);
    }
    connection.closed = server.opened(connection, connection);
  });

  const keepAlive =
    deps.keepAliveMs > 0 && Number.isFinite(deps.keepAliveMs)
      ? setInterval(
          () => {
            visitSlot(wss, nextSlot);
            nextSlot = (nextSlot + 1) % KEEP_ALIVE_SLOTS;
          },
          Math.max(1, Math.round(deps.keepAliveMs / KEEP_ALIVE_SLOTS)),
        )
      : undefined;
  keepAlive?.unref();

  return {
    async dispose() {
      clearInterval(keepAlive);
      for (const socket of wss.clients) socket.close(1001, 'Going away');
      wss.removeAllListeners();
      await new Promise<void>((resolve, reject) => wss.close((error) => (error ? reject(error) : resolve())));
    },
  };
}

/** Pings the sockets of one keep-alive slice, and terminates those that did not answer the last ping. */
function visitSlot(wss: WebSocketServer, slot: number) {
  for (const socket of wss.clients as Set<HeraldSocket>) {
    const connection = socket.connection;
    if (connection?.slot !== slot || socket.readyState !== WebSocket.OPEN) continue;
    if (connection.awaitingPong) {
      socket.terminate();
      continue;
    }
    connection.awaitingPong = true;
    socket.ping();
  }
}

/** The connection of a socket of this server (the listeners below are ws's, typed for any socket). */
function connectionOf(socket: WebSocket): Connection | undefined {
  return (socket as HeraldSocket).connection;
}

function onSocketPong(this: WebSocket) {
  const connection = connectionOf(this);
  if (connection) connection.awaitingPong = false;
}

function onSocketMessage(this: WebSocket, data: Buffer | ArrayBuffer | Buffer[]) {
  const connection = connectionOf(this);
  const handler = connection?.handler;
  if (!connection || !handler) return;
  // The promise stays pending while a subscription lives, holding this handler: a small closure (a bound
  // function costs ~350 B here: V8 gives it a dictionary of properties).
  handler(String(data)).catch((error: unknown) => failMessage(connection, error));
}

/** graphql-ws threw while handling a message (a bug, not bad input: that gets a 4400): 4500. */
function failMessage(connection: Connection, error: unknown) {
  connection.adapter.logger.error({ err: error }, 'websocket message handling failed');
  connection.socket.close(CloseCode.InternalServerError, 'Internal server error');
}

function onSocketError(this: WebSocket, error: Error) {
  // ws closes the socket itself for protocol errors (e.g. 1009 for a message too large); then this is a no-op.
  connectionOf(this)?.adapter.logger.warn({ err: error }, 'websocket error');
  this.close(CloseCode.InternalServerError, 'Internal server error');
}

function onSocketClose(this: WebSocket, code: number, reason: Buffer) {
  const connection = connectionOf(this);
  if (!connection) return;
  releaseInitTimer(connection);
  connection.adapter.onClose(connection);
  connection.closed?.(code, String(reason)).catch((error: unknown) => {
    connection.adapter.logger.error({ err: error }, 'websocket close handling failed');
  });
}

function onInitTimeout(connection: Connection) {
  connection.initTimer = undefined;
  connection.close(CloseCode.ConnectionInitialisationTimeout, 'Connection initialisation timeout');
}

function releaseInitTimer(connection: Connection) {
  clearTimeout(connection.initTimer);
  connection.initTimer = undefined;
}
