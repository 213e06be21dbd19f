import { createServer as createHttpServer, type Server } from 'node:http';
import { useCSRFPrevention } from '@graphql-yoga/plugin-csrf-prevention';
import type { TokenVerifier } from '@herald/auth';
import { notReady, type Readiness } from '@herald/config';
import type { HeraldDatabase } from '@herald/db';
import { isTracing } from '@herald/telemetry';
import {
  createYoga,
  type Plugin,
  useReadinessCheck,
  type YogaInitialContext,
  type YogaServerInstance,
} from 'graphql-yoga';
import type { ConsoleAssets } from './console-assets.js';
import { type Context, createContextBuilder, type TransportContext } from './context.js';
import type { ApiConfig } from './env.js';
import { createGraphQLFastPath } from './http-fast-path.js';
import type { Logger } from './logger.js';
import { maskError } from './mask-error.js';
import type { ApiMetrics } from './metrics.js';
import { createCompiledExecution } from './plugins/use-compiled-execution.js';
import { useConsole } from './plugins/use-console.js';
import { useDocumentLimits } from './plugins/use-document-limits.js';
import { useErrorCodes } from './plugins/use-error-codes.js';
import { useErrorLogging } from './plugins/use-error-logging.js';
import { useIntrospectionPolicy } from './plugins/use-introspection-policy.js';
import { useMetricsEndpoint } from './plugins/use-metrics-endpoint.js';
import { useOperationQuota } from './plugins/use-operation-quota.js';
import { useOperationSpanName } from './plugins/use-operation-span-name.js';
import { useRequestBodyLimit } from './plugins/use-request-body-limit.js';
import { useRequestLogging } from './plugins/use-request-logging.js';
import { useScopeCacheRelease } from './plugins/use-scope-cache-release.js';
import { useTextInputGuard } from './plugins/use-text-input-guard.js';
import { useValidationCache } from './plugins/use-validation-cache.js';
import { useWebSocketOnlySubscriptions } from './plugins/use-websocket-only-subscriptions.js';
import { databaseReadiness, pubsubReadiness } from './readiness.js';
import type { PubSubService } from './realtime/pubsub.js';
import { createWebSocketServer, type HeraldWebSocketServer } from './realtime/websocket.js';
import { traceGraphQLRequests } from './request-tracing.js';
import { schema } from './schema/index.js';
import type { TenantQuotas } from './tenancy/tenant-quotas.js';

export const GRAPHQL_PATH = '/graphql';
export const HEALTH_PATH = '/health';
export const READINESS_PATH = '/readiness';
/** Headers of which one must be present on a GET (or other "simple") request: CSRF protection. */
export const CSRF_HEADERS = ['x-graphql-yoga-csrf', 'apollo-require-preflight', 'graphql-require-preflight'];

export interface ServerDeps {
  config: ApiConfig;
  database: HeraldDatabase;
  verifier: TokenVerifier;
  logger: Logger;
  pubsub: PubSubService;
  metrics: ApiMetrics;
  /** Tenant quotas, checked on every door (docs/tenancy.md). */
  quotas: TenantQuotas;
  /** The operators' console at /console: its built files, and the token to pre-fill in development. */
  console?: { assets: ConsoleAssets | undefined; devToken?: string | undefined };
  /**
   * What `/readiness` answers: 200 when ready, else 503 with the reason. The app passes its lifecycle's
   * readiness (app-parts.ts). Must not throw.
   * @default draining, then Redis (`pubsub.readiness()`), then a database ping
   */
  readiness?: () => Promise<Readiness>;
}

export interface HeraldServer {
  yoga: YogaServerInstance<Record<string, unknown>, Context>;
  /** The node:http server; not listening until the caller calls `listen`. */
  httpServer: Server;
  /** graphql-ws on the same server, port and path. */
  webSockets: HeraldWebSocketServer;
  /** `/readiness` answers 503 from now on, so load balancers stop sending new work here. */
  drain(): void;
  readonly draining: boolean;
}

/**
 * Builds Herald's HTTP server: Yoga on `/graphql` (POST, and GET for queries only), graphql-ws on the
 * same path, `/health` (liveness: the process answers), `/readiness` (the database answers and we're
 * not draining), `/metrics` (Prometheus) and the operators' console on `/console/`.
 * Never listens by itself and has no side effects beyond the objects it returns.
 */
export function createServer(deps: ServerDeps): HeraldServer {
  const { config, database, logger } = deps;
  let draining = false;
  const readiness =
    deps.readiness ??
    (async (): Promise<Readiness> => {
      if (draining) return notReady('draining');
      const redis = pubsubReadiness(deps.pubsub);
      return redis.ready ? databaseReadiness(database, logger) : redis;
    });
  const buildContext = createContextBuilder({
    verifier: deps.verifier,
    db: database.db,
    pubsub: deps.pubsub,
    logger,
    webhooks: config.webhooks,
    quotas: deps.quotas,
    metrics: deps.metrics,
  });

  const compiled = createCompiledExecution();
  // The context finds the request's logger (use-request-logging.ts) itself, on first use.
  const context = (initial: YogaInitialContext & TransportContext) => buildContext(initial);

  const plugins: Plugin[] = [
    useRequestLogging(logger),
    useMetricsEndpoint(deps.metrics.registry),
    useConsole({ assets: deps.console?.assets, devToken: deps.console?.devToken }),
    onlyOnPath(
      READINESS_PATH,
      useReadinessCheck({
        endpoint: READINESS_PATH,
        // 503 while draining, while PostgreSQL does not answer (bounded by the ping's timeout) and while
        // Redis is reconnecting: a load balancer then sends new work to a pod that can do it.
        check: async () => {
          const answer = await readiness();
          return answer.ready ? true : unready(answer.reason);
        },
      }),
    ),
    useCSRFPrevention({ requestHeaders: CSRF_HEADERS }),
    ...useDocumentLimits(config.graphql),
    useIntrospectionPolicy(config.graphql.introspection),
    useTextInputGuard(),
    useWebSocketOnlySubscriptions() as Plugin,
    useErrorCodes(),
    useErrorLogging(logger) as Plugin,
    useRequestBodyLimit(config.http.maxRequestBodyBytes),
    useScopeCacheRelease(),
    // Before execution, compiled or not: a refused operation runs nothing.
    useOperationQuota() as Plugin,
    // Queries and mutations over HTTP run compiled (graphql-jit, one compilation per document and
    // operation); WebSocket operations keep graphql-js (the shared subscription execution is built on
    // it). It also records the query documents the HTTP fast path may run by itself.
    compiled.plugin,
    // Last: it must see every validation rule the plugins above add.
    useValidationCache(),
    // Tracing on (OTEL_* variables): the request span takes the operation's name (request-tracing.ts).
    ...(isTracing() ? [useOperationSpanName()] : []),
  ];

  const yoga = createYoga<Record<string, unknown>, Context>({
    schema,
    graphqlEndpoint: GRAPHQL_PATH,
    healthCheckEndpoint: HEALTH_PATH,
    landingPage: false,
    graphiql: config.graphql.graphiql ? { title: 'Herald', subscriptionsProtocol: 'WS' } : false,
    // GraphiQL bundled into the page (no CDN), so it works offline, as `pnpm start` promises. Loaded on
    // the first GraphiQL request: that page is ~30 MB of heap an idle server would otherwise carry.
    renderGraphiQL: async (options) => (await import('@graphql-yoga/render-graphiql')).renderGraphiQL(options),
    // Enforced by useRequestBodyLimit (same 413), which skips Yoga's per-request stream when the
    // length is declared.
    maxRequestBodySize: false,
    // Parse cache: Yoga's. Validation cache: useValidationCache (same keys, cheaper per request).
    parserAndValidationCache: { validationCache: false },
    logging: {
      debug: (...args) => logger.debug(args.map(String).join(' ')),
      info: (...args) => logger.info(args.map(String).join(' ')),
      warn: (...args) => logger.warn(args.map(String).join(' ')),
      error: (...args) => logger.error(args.map(String).join(' ')),
    },
    // Yoga's masking: a resolver's GraphQLError (our named errors) passes; anything else becomes
    // "Unexpected error." with code INTERNAL_SERVER_ERROR (details only in development).
    // A database outage becomes 503 SERVICE_UNAVAILABLE (mask-error.ts). Details only where
    // `errorDetails` allows: never by default in single or cluster mode (env.ts).
    maskedErrors: { isDev: config.graphql.errorDetails, maskError },
    context,
    plugins,
  });

  // POST /graphql with a JSON body skips Yoga's fetch-API machinery (http-fast-path.ts); the rest is Yoga's.
  const httpServer = createHttpServer(
    config.http.fastPath
      ? createGraphQLFastPath({
          yoga,
          path: GRAPHQL_PATH,
          maxRequestBodyBytes: config.http.maxRequestBodyBytes,
          logger,
          errorDetails: config.graphql.errorDetails,
          context,
          compiled,
          requests: deps.metrics.httpRequests,
        })
      : yoga,
  );
  // With tracing on, requests to /graphql get their operation span first (request-tracing.ts).
  traceGraphQLRequests(httpServer, GRAPHQL_PATH, { stretches: config.http.fastPath });
  const webSockets = createWebSocketServer({
    httpServer,
    yoga,
    verifier: deps.verifier,
    logger,
    metrics: deps.metrics,
    path: GRAPHQL_PATH,
    keepAliveMs: config.ws.keepAliveMs,
    sharedExecution: config.ws.sharedExecution,
    quotas: deps.quotas,
  });
  return {
    yoga,
    httpServer,
    webSockets,
    drain() {
      draining = true;
    },
    get draining() {
      return draining;
    },
  };
}

/**
 * `plugin` with its `onRequest` run only for requests whose path ends with `path`. Yoga's readiness
 * check matches every request against a URLPattern after its cheap checks fail (~2 % of a request's
 * CPU); the cheap checks are the same: the URL ends with the path, or the pathname is the path.
 */
function onlyOnPath(path: string, plugin: Plugin): Plugin {
  const { onRequest } = plugin;
  if (!onRequest) return plugin;
  return {
    ...plugin,
    onRequest(payload) {
      if (payload.request.url.endsWith(path) || payload.url.pathname === path) return onRequest(payload);
    },
  };
}

/** A `/readiness` answer naming why this pod should get no traffic now. */
function unready(reason: string): Response {
  return Response.json({ ready: false, reason }, { status: 503 });
}
