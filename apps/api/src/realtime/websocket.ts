import type { Server } from 'node:http';
import type { TokenVerifier } from '@herald/auth';
import type { YogaServerInstance } from 'graphql-yoga';
import { WebSocketServer } from 'ws';
import type { Context } from '../context.js';
import type { Logger } from '../logger.js';
import type { ApiMetrics } from '../metrics.js';
import type { TenantQuotas } from '../tenancy/tenant-quotas.js';
import { HeraldSocket, serveGraphQLWs } from './graphql-ws-adapter.js';
import { createSubscriptionGroups } from './subscription-groups.js';
import { CONNECTION_INIT_TIMEOUT_MS, createSocketAdmission } from './ws-admission.js';
import { createSocketLifecycle, type SocketLifecycle } from './ws-lifecycle.js';
import { createOnNext, MAX_BUFFERED_BYTES, MAX_WS_MESSAGE_BYTES } from './ws-message-limits.js';
import { createSubscribeHooks } from './ws-subscribe.js';

/**
 * The WebSocket server, put together from one module per concern:
 *
 * - ws-admission.ts: `connection_init` (auth, the user's socket cap), token expiry, per-operation credentials;
 * - ws-subscribe.ts: the subscribe path (subscription cap, tenant quotas, resume, shared groups), with
 *   ws-subscription-streams.ts for the iterators around each subscription's stream;
 * - ws-message-limits.ts: message size and send-buffer limits (slow consumers on the stock path);
 * - ws-lifecycle.ts: drain on shutdown, terminate, shed for rebalancing;
 * - graphql-ws-adapter.ts: graphql-ws's protocol on `ws`, keep-alive and the `connection_init` deadline;
 * - subscription-groups.ts: one execution per event shared by many subscriptions.
 */

export { AUTH_UNAVAILABLE_CLOSE_CODE, CONNECTION_INIT_TIMEOUT_MS, SOCKET_LIMIT_CLOSE_CODE } from './ws-admission.js';
export { SERVICE_RESTART_CLOSE_CODE } from './ws-lifecycle.js';
export { MAX_BUFFERED_BYTES, MAX_WS_MESSAGE_BYTES } from './ws-message-limits.js';
export { MAX_SUBSCRIPTIONS_PER_SOCKET, resumeArgument } from './ws-subscribe.js';

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

export interface HeraldWebSocketServer extends SocketLifecycle {
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
 *   `authenticateOperation` in ws-admission.ts).
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

  const admission = createSocketAdmission({ verifier, quotas: deps.quotas });

  const server = serveGraphQLWs<Record<string, unknown>>(
    {
      connectionInitWaitTimeout: CONNECTION_INIT_TIMEOUT_MS,
      onConnect: admission.onConnect,
      ...createSubscribeHooks({
        yoga,
        logger,
        metrics,
        sharedExecution: deps.sharedExecution,
        quotas: deps.quotas,
        groups,
        admission,
      }),
      onNext: createOnNext(metrics),
    },
    wss,
    {
      keepAliveMs: deps.keepAliveMs,
      logger,
      onClose(extra) {
        metrics.openSockets.dec();
        admission.release(extra);
      },
    },
  );

  return {
    ...createSocketLifecycle(wss, server),
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
