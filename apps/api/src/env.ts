import { createPublicKey } from 'node:crypto';
import type { TokenKeySource } from '@herald/auth';
import {
  durationMs,
  type EncryptionKeyring,
  encryptionKeys,
  InvalidConfigError,
  parseEnv,
  redisUrl,
} from '@herald/config';
import { DEFAULT_REDIS_PREFIX } from '@herald/contracts';
import { type DatabaseConfig, DEFAULT_QUERY_TIMEOUT_MS } from '@herald/db';
import { z } from 'zod';
import { MAX_QUOTA_VALUE, type TenantLimits } from './tenancy/quotas.js';

/** The keep-alive must stay at or under 30 s, below common proxy idle timeouts. */
const MAX_KEEPALIVE_MS = 30_000;
const MIB = 1024 * 1024;
/** After SIGTERM, /readiness answers 503 this long while the server still serves (outside embedded mode). */
const DEFAULT_DRAIN_DELAY_MS = 5_000;
/** A drain pause longer than this would eat most of any orchestrator's grace period. */
const MAX_DRAIN_DELAY_MS = 60_000;

const port = z.coerce.number().int().min(0).max(65_535);
const positiveInt = z.coerce.number().int().positive();
/** A tenant quota: a whole number, 0 for none (MAX_QUOTA_VALUE bounds overrides too). */
/**
 * One tenant's HTTP operations running at once on a pod. Measured with organisation A storming (64
 * request loops) while B queries every 50 ms: B's p99 under the storm fell as the turns did (bench
 * results in bench/results/noisy-neighbour/), and one tenant alone still fills a pod with 4 at a time.
 */
const DEFAULT_CONCURRENT_OPERATIONS_PER_POD = 4;
const quota = z.coerce.number().int().min(0).max(MAX_QUOTA_VALUE);
const postgresUrl = z.url({ protocol: /^postgres(ql)?$/, error: 'expected a postgres:// URL' });
const pemPublicKey = z.string().refine(
  (pem) => {
    try {
      createPublicKey(pem.replace(/\\n/g, '\n'));
      return true;
    } catch {
      return false;
    }
  },
  { error: 'expected a PEM-encoded public key (SPKI)' },
);

export const EnvSchema = z.object({
  // Not defaulted here: whether it was set decides error masking outside embedded mode (see below).
  NODE_ENV: z.enum(['development', 'production', 'test']).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),

  // http
  PORT: port.default(4000),
  HOST: z.string().min(1).default('0.0.0.0'),
  MAX_REQUEST_BODY_BYTES: positiveInt.default(MIB),
  HTTP_FAST_PATH: z.stringbool().default(true),
  SHUTDOWN_GRACE_MS: positiveInt.default(10_000),
  SHUTDOWN_DRAIN_DELAY_MS: z.coerce.number().int().min(0).max(MAX_DRAIN_DELAY_MS).optional(),

  // storage
  DATABASE_URL: postgresUrl.optional(),
  DATABASE_POOL_MAX: positiveInt.default(10),
  DATABASE_QUERY_TIMEOUT_MS: z.coerce.number().int().min(0).default(DEFAULT_QUERY_TIMEOUT_MS),
  DATABASE_PREPARED_STATEMENTS: z.stringbool().default(true),
  REDIS_URL: redisUrl().optional(),
  HERALD_DATA_DIR: z.string().min(1).default('./.herald'),
  HERALD_CONSOLE_DIR: z.string().min(1).optional(),

  // auth
  JWT_SECRET: z.string().min(32, { error: 'must be at least 32 characters' }).optional(),
  JWT_PUBLIC_KEY: pemPublicKey.optional(),
  JWT_JWKS_URL: z.url({ protocol: /^https?$/ }).optional(),
  JWT_ISSUER: z.string().min(1).optional(),
  JWT_AUDIENCE: z.string().min(1).optional(),

  // graphql
  GRAPHQL_INTROSPECTION: z.stringbool().optional(),
  GRAPHIQL: z.stringbool().optional(),
  MAX_QUERY_DEPTH: positiveInt.default(12),
  MAX_QUERY_ALIASES: positiveInt.default(15),
  MAX_QUERY_TOKENS: positiveInt.default(2_000),
  MAX_QUERY_COST: positiveInt.default(5_000),
  MAX_QUERY_DIRECTIVES: positiveInt.default(50),

  // websocket
  WS_KEEPALIVE_MS: positiveInt
    .max(MAX_KEEPALIVE_MS, { error: `must be at most ${MAX_KEEPALIVE_MS} (kept below common proxy idle timeouts)` })
    .default(12_000),
  WS_SHARED_EXECUTION: z.stringbool().default(true),
  /** Cluster mode: pods report socket counts to Redis and shed the excess over their fair share (1012). */
  WS_REBALANCE: z.stringbool().default(true),

  // subscriptions: resuming from a cursor (docs/subscriptions.md)
  HERALD_REDIS_PREFIX: z.string().default(DEFAULT_REDIS_PREFIX),
  SUBSCRIPTION_HISTORY_SIZE: z.coerce.number().int().min(0).max(1_000_000).default(1_000),
  SUBSCRIPTION_HISTORY_TTL: durationMs().default(3_600_000),
  SUBSCRIPTION_REPLAY_CONCURRENCY: z.coerce.number().int().min(1).max(1_000).default(4),

  // webhooks
  WEBHOOK_TIMEOUT_MS: positiveInt.default(10_000),
  WEBHOOK_RETRY_BASE_MS: positiveInt.default(5_000),
  WEBHOOK_RETRY_HORIZON: durationMs().default(3 * 24 * 3_600_000),
  WEBHOOK_ALLOW_PRIVATE_URLS: z.stringbool().optional(),
  WEBHOOK_DISABLE_AFTER: durationMs().default(5 * 24 * 3_600_000),
  WEBHOOK_RETENTION: durationMs().default(30 * 24 * 3_600_000),
  HERALD_ENCRYPTION_KEYS: encryptionKeys().optional(),

  // tenant quotas (docs/tenancy.md); 0 = no limit
  TENANT_OPERATIONS_PER_SECOND: quota.default(1_000),
  TENANT_PUBLISHES_PER_SECOND: quota.default(100),
  TENANT_SOCKETS_PER_USER: quota.default(100),
  TENANT_SUBSCRIPTIONS: quota.default(10_000),
  TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT: quota.default(100),
  TENANT_CONCURRENT_OPERATIONS_PER_POD: quota.default(DEFAULT_CONCURRENT_OPERATIONS_PER_POD),
});

/**
 * The modes (docs/api.md, "Modes"). `embedded`: no DATABASE_URL, no REDIS_URL (PGlite, in-memory pub/sub, in-process webhooks).
 * `single`: DATABASE_URL only (PostgreSQL, in-memory pub/sub for one pod, in-process webhooks on the
 * database). `cluster`: both (Redis pub/sub, separate dispatcher apps). REDIS_URL alone is refused.
 */
export type Mode = 'embedded' | 'single' | 'cluster';

/** Herald API configuration, grouped by concern. Built once by {@link loadApiConfig}. */
export interface ApiConfig {
  mode: Mode;
  env: 'development' | 'production' | 'test';
  isProduction: boolean;
  logLevel: z.output<typeof EnvSchema>['LOG_LEVEL'];
  http: {
    host: string;
    port: number;
    maxRequestBodyBytes: number;
    /**
     * `HTTP_FAST_PATH`: answer `POST /graphql` with a JSON body straight from node:http instead of through
     * Yoga's fetch-API request/response objects (http-fast-path.ts); same answers, less CPU per request.
     * @default true
     */
    fastPath: boolean;
    shutdownGraceMs: number;
    /**
     * `SHUTDOWN_DRAIN_DELAY_MS`: after SIGTERM, how long `/readiness` answers 503 while the server still
     * accepts connections and serves (WebSockets included), so a load balancer polling readiness takes
     * the pod out before it stops accepting. Then the usual shutdown (1012, SHUTDOWN_GRACE_MS) follows.
     * @default 5000, 0 in embedded mode (a laptop's Ctrl-C stops at once)
     */
    drainDelayMs: number;
  };
  database: DatabaseConfig;
  /**
   * Redis for cross-pod pub/sub (`redis://`, `rediss://`, `redis+sentinel://` or `redis+cluster://`);
   * undefined keeps pub/sub in memory (one process).
   */
  redisUrl: string | undefined;
  /** `HERALD_REDIS_PREFIX`: every Redis key and channel starts with it. @default 'herald:' */
  redisPrefix: string;
  /**
   * Resumable subscriptions: events kept per organisation (`SUBSCRIPTION_HISTORY_SIZE`, 0
   * turns resuming off, @default 1000) and for how long after its last event (`SUBSCRIPTION_HISTORY_TTL`,
   * @default 1h). A bad value stops the process at start.
   */
  subscriptionHistory: { size: number; ttlMs: number };
  /**
   * `SUBSCRIPTION_REPLAY_CONCURRENCY`: history reads (one page each) for resuming subscriptions at a
   * time per pod; more wait in turn, so a resume storm queues instead of timing Redis out. @default 4
   */
  subscriptionReplayConcurrency: number;
  /** Where embedded data and the generated development secret live. */
  dataDir: string;
  auth: {
    /** undefined: embedded mode generates a development secret in `dataDir`. */
    key: TokenKeySource | undefined;
    issuer: string | undefined;
    audience: string | undefined;
  };
  graphql: {
    /**
     * Unexpected errors keep their message and stack in responses (Yoga's `isDev`). On only when
     * NODE_ENV=development is set explicitly, or in embedded mode without NODE_ENV (a laptop);
     * single and cluster deployments mask them even when NODE_ENV is unset.
     */
    errorDetails: boolean;
    introspection: boolean;
    graphiql: boolean;
    maxDepth: number;
    maxAliases: number;
    maxTokens: number;
    /** graphql-armor's cost model (objects 2, scalars 1, ×1.5 per level). */
    maxCost: number;
    maxDirectives: number;
  };
  ws: { keepAliveMs: number; sharedExecution: boolean; rebalance: boolean };
  /** The operators' console at /console (apps/console). */
  console: {
    /**
     * Folder of the built console; undefined looks beside the bundle, then in apps/console/dist.
     * A folder without index.html stops the start with an error naming it.
     */
    dir: string | undefined;
  };
  webhooks: {
    timeoutMs: number;
    retryBaseMs: number;
    retryHorizonMs: number;
    allowPrivateUrls: boolean;
    /** `WEBHOOK_DISABLE_AFTER`: an endpoint failing every attempt this long is disabled (docs/webhooks.md). */
    disableAfterMs: number;
    /** `WEBHOOK_RETENTION`: how long delivered webhooks and their attempts are kept. */
    retentionMs: number;
    /**
     * `HERALD_ENCRYPTION_KEYS`: seals and opens the endpoints' signing secrets (the first key seals,
     * every key opens). Required outside embedded mode; undefined: embedded mode generates one in
     * `dataDir` at start.
     */
    encryptionKeys: EncryptionKeyring | undefined;
    /**
     * `TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT`: attempts in flight for one organisation in the in-process
     * dispatcher (embedded and single mode; 0: no cap).
     */
    orgConcurrency: number;
  };
  /**
   * Default tenant quotas (`TENANT_OPERATIONS_PER_SECOND` 1000, `TENANT_PUBLISHES_PER_SECOND` 100,
   * `TENANT_SOCKETS_PER_USER` 100, `TENANT_SUBSCRIPTIONS` 10000; 0 = none), each overridable per
   * organisation by a platform administrator (docs/tenancy.md).
   */
  tenantLimits: TenantLimits;
  /**
   * `TENANT_CONCURRENT_OPERATIONS_PER_POD`: HTTP operations one tenant runs at once on this pod; its
   * further ones wait their turn behind its own (tenancy/operation-turns.ts). A tenant alone on the pod
   * runs up to `DATABASE_POOL_MAX` − 1. 0: no turns.
   */
  concurrentOperationsPerPod: number;
}

/**
 * Parses and validates the environment. The only reader of `process.env` in the API.
 * @throws InvalidConfigError with one line per bad variable
 */
export function loadApiConfig(env: Record<string, string | undefined> = process.env): ApiConfig {
  const parsed = parseEnv(EnvSchema, env);
  checkModes(parsed);
  checkKeySources(parsed);
  checkEncryptionKeys(parsed);
  const nodeEnv = parsed.NODE_ENV ?? 'development';
  const isProduction = nodeEnv === 'production';
  const mode: Mode = parsed.DATABASE_URL ? (parsed.REDIS_URL ? 'cluster' : 'single') : 'embedded';
  const embeddedDatabase = !parsed.DATABASE_URL;
  return {
    mode,
    env: nodeEnv,
    isProduction,
    logLevel: parsed.LOG_LEVEL,
    http: {
      host: parsed.HOST,
      port: parsed.PORT,
      maxRequestBodyBytes: parsed.MAX_REQUEST_BODY_BYTES,
      fastPath: parsed.HTTP_FAST_PATH,
      shutdownGraceMs: parsed.SHUTDOWN_GRACE_MS,
      drainDelayMs: parsed.SHUTDOWN_DRAIN_DELAY_MS ?? (mode === 'embedded' ? 0 : DEFAULT_DRAIN_DELAY_MS),
    },
    database: parsed.DATABASE_URL
      ? {
          kind: 'postgres',
          url: parsed.DATABASE_URL,
          poolMax: parsed.DATABASE_POOL_MAX,
          queryTimeoutMs: parsed.DATABASE_QUERY_TIMEOUT_MS,
          preparedStatements: parsed.DATABASE_PREPARED_STATEMENTS,
        }
      : { kind: 'embedded', dataDir: `${parsed.HERALD_DATA_DIR}/pgdata` },
    redisUrl: parsed.REDIS_URL,
    redisPrefix: parsed.HERALD_REDIS_PREFIX,
    subscriptionHistory: { size: parsed.SUBSCRIPTION_HISTORY_SIZE, ttlMs: parsed.SUBSCRIPTION_HISTORY_TTL },
    subscriptionReplayConcurrency: parsed.SUBSCRIPTION_REPLAY_CONCURRENCY,
    dataDir: parsed.HERALD_DATA_DIR,
    auth: {
      key: parsed.JWT_SECRET
        ? { kind: 'secret', secret: parsed.JWT_SECRET }
        : parsed.JWT_PUBLIC_KEY
          ? { kind: 'public-key', pem: parsed.JWT_PUBLIC_KEY.replace(/\\n/g, '\n') }
          : parsed.JWT_JWKS_URL
            ? { kind: 'jwks', url: parsed.JWT_JWKS_URL }
            : undefined,
      issuer: parsed.JWT_ISSUER,
      audience: parsed.JWT_AUDIENCE,
    },
    graphql: {
      errorDetails: parsed.NODE_ENV === 'development' || (parsed.NODE_ENV === undefined && mode === 'embedded'),
      introspection: parsed.GRAPHQL_INTROSPECTION ?? !isProduction,
      graphiql: parsed.GRAPHIQL ?? !isProduction,
      maxDepth: parsed.MAX_QUERY_DEPTH,
      maxAliases: parsed.MAX_QUERY_ALIASES,
      maxTokens: parsed.MAX_QUERY_TOKENS,
      maxCost: parsed.MAX_QUERY_COST,
      maxDirectives: parsed.MAX_QUERY_DIRECTIVES,
    },
    ws: {
      keepAliveMs: parsed.WS_KEEPALIVE_MS,
      sharedExecution: parsed.WS_SHARED_EXECUTION,
      rebalance: parsed.WS_REBALANCE,
    },
    console: { dir: parsed.HERALD_CONSOLE_DIR },
    webhooks: {
      timeoutMs: parsed.WEBHOOK_TIMEOUT_MS,
      retryBaseMs: parsed.WEBHOOK_RETRY_BASE_MS,
      retryHorizonMs: parsed.WEBHOOK_RETRY_HORIZON,
      allowPrivateUrls: parsed.WEBHOOK_ALLOW_PRIVATE_URLS ?? embeddedDatabase,
      disableAfterMs: parsed.WEBHOOK_DISABLE_AFTER,
      retentionMs: parsed.WEBHOOK_RETENTION,
      encryptionKeys: parsed.HERALD_ENCRYPTION_KEYS,
      orgConcurrency: parsed.TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT,
    },
    tenantLimits: {
      operationsPerSecond: parsed.TENANT_OPERATIONS_PER_SECOND,
      publishesPerSecond: parsed.TENANT_PUBLISHES_PER_SECOND,
      socketsPerUser: parsed.TENANT_SOCKETS_PER_USER,
      subscriptions: parsed.TENANT_SUBSCRIPTIONS,
      webhookAttemptsInFlight: parsed.TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT,
    },
    concurrentOperationsPerPod: parsed.TENANT_CONCURRENT_OPERATIONS_PER_POD,
  };
}

/**
 * REDIS_URL without DATABASE_URL would put each pod on its own embedded database, and no dispatcher
 * could read it: webhooks would silently never leave. Refused.
 */
function checkModes(env: z.output<typeof EnvSchema>): void {
  if (env.REDIS_URL && !env.DATABASE_URL) {
    throw new InvalidConfigError([
      'REDIS_URL: set only together with DATABASE_URL (cluster mode); pods cannot share an embedded database',
    ]);
  }
}

/** Rules across variables, checked once each variable is valid on its own. */
function checkKeySources(env: z.output<typeof EnvSchema>): void {
  const keys = (['JWT_SECRET', 'JWT_PUBLIC_KEY', 'JWT_JWKS_URL'] as const).filter((name) => env[name]);
  if (keys.length > 1) {
    throw new InvalidConfigError([`${keys[1]}: set only one of ${keys.join(', ')}`]);
  }
  if (env.JWT_JWKS_URL && env.NODE_ENV === 'production' && new URL(env.JWT_JWKS_URL).protocol !== 'https:') {
    throw new InvalidConfigError(['JWT_JWKS_URL: must be an https:// URL outside development']);
  }
  if (keys.length === 0 && env.DATABASE_URL) {
    throw new InvalidConfigError([
      'JWT_SECRET: required in cluster mode (DATABASE_URL is set): set JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL',
    ]);
  }
}

/** Single and cluster mode seal webhook secrets with a keyring every pod and dispatcher shares. */
function checkEncryptionKeys(env: z.output<typeof EnvSchema>): void {
  if (env.DATABASE_URL && !env.HERALD_ENCRYPTION_KEYS) {
    throw new InvalidConfigError([
      'HERALD_ENCRYPTION_KEYS: required when DATABASE_URL is set: <id>:<base64 32-byte key>, e.g. k1:$(openssl rand -base64 32)',
    ]);
  }
}
