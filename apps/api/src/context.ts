import { AuthUnavailableError, InvalidTokenError, type TokenVerifier, type Viewer } from '@herald/auth';
import { createAuthorLoader, type Database } from '@herald/db';
import type { YogaInitialContext } from 'graphql-yoga';
import type { Kysely } from 'kysely';
import type { ApiConfig } from './env.js';
import { AuthServiceUnavailableError, InvalidCredentialsError } from './errors.js';
import { createLoaders, type Loaders } from './loaders.js';
import type { Logger } from './logger.js';
import type { ApiMetrics } from './metrics.js';
import { requestLogger } from './plugins/use-request-logging.js';
import type { PubSubService } from './realtime/pubsub.js';
import type { TenantQuotas } from './tenancy/tenant-quotas.js';

/** Length of `Bearer ` (the 7-character prefix is removed). */
const BEARER_PREFIX = 'bearer ';

/** Everything a resolver may use. Built per HTTP request and per WebSocket operation. */
export interface Context extends YogaInitialContext {
  /** The caller, or null when no credentials were sent. */
  viewer: Viewer | null;
  db: Kysely<Database>;
  /** Batching loaders; fresh per request so no cached row outlives it. Resolvers use `loadersFor`. */
  loaders: Loaders;
  /** Pub/sub for realtime events (in memory, or Redis in cluster mode). */
  pubsub: PubSubService;
  /** Logger bound to this request's id. */
  log: Logger;
  /** Webhook settings resolvers apply (the receiver URL policy). */
  webhooks: ApiConfig['webhooks'];
  /** Tenant quotas: resolvers check `publishesPerSecond` and read limits and usage through it. */
  quotas: TenantQuotas;
  /** The server's metrics, for the few resolvers that count something; absent in a context built alone. */
  metrics?: ApiMetrics;
  /**
   * Subscriptions: the event being delivered, set by the resolver per event (a subscription's events
   * are executed one at a time) and read by the socket layer for `extensions.cursor`, the switch from
   * catch-up to a shared group, and the event-to-send latency metric.
   */
  event?: SubscriptionEventInfo;
}

/** The subscription event being delivered (see {@link Context.event}). */
export interface SubscriptionEventInfo {
  /** When it entered the history (ms since epoch). */
  emittedAt: number;
  epoch: string;
  position: number;
  /** `payload.extensions.cursor` of the `next` message; absent when resuming is off. */
  cursor: string | undefined;
  /** From the history (catch-up after `after`) rather than live. */
  replayed: boolean;
  /** The publishing operation's `traceparent`, when tracing was on where it was published. */
  traceparent?: string;
}

/** What the transport hands the context builder besides Yoga's own initial context. */
export interface TransportContext {
  /**
   * WebSocket operations only: the viewer authenticated once at `connection_init` (null when the
   * socket sent no token). When present, no credentials are read again.
   */
  socketViewer?: Viewer | null;
  /** Request-scoped logger, when a plugin made one. */
  log?: Logger;
  /** Set by the WebSocket server; anything else is HTTP. Subscriptions run only on `websocket`. */
  transport?: 'websocket';
}

export interface ContextDeps {
  verifier: TokenVerifier;
  db: Kysely<Database>;
  pubsub: PubSubService;
  logger: Logger;
  webhooks: ApiConfig['webhooks'];
  quotas: TenantQuotas;
  metrics?: ApiMetrics;
}

/**
 * The single context builder behind HTTP and WebSocket: it reads the `authorization`
 * header of an HTTP request, or the `authToken`/`authorization` connection parameter of a socket.
 * @throws InvalidCredentialsError (HTTP 401, UNAUTHENTICATED) when credentials are present but not valid
 * @throws AuthServiceUnavailableError (HTTP 503, AUTH_UNAVAILABLE) when the key source does not answer
 */
export function createContextBuilder(deps: ContextDeps) {
  const makeAuthorLoader = () => createAuthorLoader(deps.db);
  // `log` is looked up on first use: the request's child logger is made only if something logs. One
  // getter for every context, not a closure per request: an accessor holding a new function gives each
  // context its own hidden class (map and descriptors), and `{ ...initial, …, get log() {} }` cost
  // 6.5–7 µs of CPU and ~850 B retained per context; built this way 0.65–0.7 µs and ~340 B (the real
  // builder in a throw-away loop, bench/results/PROFILE.md). context.test.ts checks the getter is shared.
  const lazyLog: PropertyDescriptor = {
    get(this: Context): Logger {
      return requestLogger(this.request, deps.logger);
    },
    enumerable: true,
    configurable: true,
  };
  return async (initial: YogaInitialContext & TransportContext): Promise<Context> => {
    let viewer: Viewer | null;
    if (initial.socketViewer !== undefined) {
      viewer = initial.socketViewer;
    } else {
      const token = readToken(initial.request?.headers.get('authorization'));
      viewer = token === undefined ? null : await authenticate(deps.verifier, token);
    }
    // Every field of `initial`, then Herald's (which win over fields of the same name).
    const context = Object.assign({}, initial) as Context;
    context.viewer = viewer;
    context.db = deps.db;
    context.pubsub = deps.pubsub;
    context.loaders = createLoaders(makeAuthorLoader);
    // A logger a plugin made (copied above) is kept; otherwise the request's, on first use.
    if (initial.log == null) Object.defineProperty(context, 'log', lazyLog);
    context.webhooks = deps.webhooks;
    context.quotas = deps.quotas;
    context.metrics = deps.metrics;
    return context;
  };
}

/** Verifies a token, turning any refusal into the client-facing error. */
export async function authenticate(verifier: TokenVerifier, token: string): Promise<Viewer> {
  try {
    return await verifier.verify(token);
  } catch (error) {
    if (error instanceof InvalidTokenError) {
      throw new InvalidCredentialsError(error.reason === 'expired' ? 'Token expired' : capitalise(error.message));
    }
    if (error instanceof AuthUnavailableError) throw new AuthServiceUnavailableError(error.retryAfterSec);
    throw error;
  }
}

/**
 * Reads the JWT from an `authorization` value (HTTP header, or the `authorization` connection param).
 * @returns undefined when no credentials were sent at all
 * @throws InvalidCredentialsError for a value that is not `Bearer <token>`
 */
export function readToken(authorization: string | null | undefined): string | undefined {
  return authorization == null ? undefined : stripBearer(authorization);
}

/**
 * Reads the JWT from a graphql-ws `connection_init` payload: `authToken`, else `authorization: "Bearer …"`
 * (any capitalisation of the key).
 * @returns undefined when the payload carries no credentials
 * @throws InvalidCredentialsError for a malformed `authorization` value
 */
export function readConnectionToken(params: Readonly<Record<string, unknown>> | undefined): string | undefined {
  if (!params) return undefined;
  if (typeof params.authToken === 'string' && params.authToken.length > 0) return params.authToken;
  // Header-style params may come capitalised (`Authorization`), as clients copy them from HTTP headers.
  const key = Object.keys(params).find((name) => name.toLowerCase() === 'authorization');
  const authorization = key === undefined ? undefined : params[key];
  if (typeof authorization === 'string') return stripBearer(authorization);
  return undefined;
}

function stripBearer(value: string): string {
  if (value.slice(0, BEARER_PREFIX.length).toLowerCase() !== BEARER_PREFIX) {
    throw new InvalidCredentialsError('Authorization header must use the Bearer scheme');
  }
  const token = value.slice(BEARER_PREFIX.length).trim();
  if (token.length === 0) throw new InvalidCredentialsError('Bearer token is empty');
  return token;
}

function capitalise(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
