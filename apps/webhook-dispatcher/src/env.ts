import { durationMs, type EncryptionKeyring, encryptionKeys, parseEnv, redisUrl } from '@herald/config';
import { DEFAULT_REDIS_PREFIX } from '@herald/contracts';
import type { DispatcherSettings, DispatcherStep } from '@herald/webhook-engine';
import { z } from 'zod';

const port = z.coerce.number().int().min(0).max(65_535);
const positiveInt = z.coerce.number().int().positive();
const postgresUrl = z.url({ protocol: /^postgres(ql)?$/, error: 'expected a postgres:// URL' });

export const EnvSchema = z.object({
  NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),

  // operations server (/health, /readiness, /metrics)
  PORT: port.default(4001),
  HOST: z.string().min(1).default('0.0.0.0'),
  SHUTDOWN_GRACE_MS: positiveInt.default(15_000),

  // storage: the dispatcher app is cluster mode only (embedded mode runs it inside the API)
  DATABASE_URL: postgresUrl,
  DATABASE_POOL_MAX: positiveInt.default(10),
  DATABASE_PREPARED_STATEMENTS: z.stringbool().default(true),
  REDIS_URL: redisUrl(),
  HERALD_REDIS_PREFIX: z.string().default(DEFAULT_REDIS_PREFIX),

  // the keyring the endpoints' signing secrets are sealed under (the API's)
  HERALD_ENCRYPTION_KEYS: encryptionKeys(),

  // delivery
  WEBHOOK_TIMEOUT_MS: positiveInt.default(10_000),
  WEBHOOK_RETRY_BASE_MS: positiveInt.default(5_000),
  WEBHOOK_RETRY_HORIZON: durationMs().default(3 * 24 * 3_600_000),
  WEBHOOK_ALLOW_PRIVATE_URLS: z.stringbool().default(false),
  WEBHOOK_DISABLE_AFTER: durationMs().default(5 * 24 * 3_600_000),
  WEBHOOK_RETENTION: durationMs().default(30 * 24 * 3_600_000),

  // capacity and timing
  WEBHOOK_CONCURRENCY: positiveInt.default(100),
  TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT: z.coerce.number().int().min(0).default(100),
  WEBHOOK_ENDPOINT_CONCURRENCY: positiveInt.default(10),
  WEBHOOK_POLL_INTERVAL_MS: positiveInt.default(500),

  // tests only: SIGKILL this very process at a step of the straight path (crash-recovery tests)
  HERALD_TEST_CRASH_AT: z.enum(['after-fan-out', 'after-claim', 'after-post']).optional(),
});

/** The dispatcher's configuration, grouped by concern. Built once by {@link loadDispatcherConfig}. */
export interface DispatcherConfig {
  env: 'development' | 'production' | 'test';
  logLevel: z.output<typeof EnvSchema>['LOG_LEVEL'];
  http: { host: string; port: number; shutdownGraceMs: number };
  databaseUrl: string;
  databasePoolMax: number;
  /** Send the engine's statements as named prepared statements (`DATABASE_PREPARED_STATEMENTS`). */
  databasePreparedStatements: boolean;
  /** `redis://`, `rediss://`, `redis+sentinel://` or `redis+cluster://` (see `@herald/config`). */
  redisUrl: string;
  /** Prefix of every Redis key (`HERALD_REDIS_PREFIX`). */
  redisPrefix: string;
  /** `HERALD_ENCRYPTION_KEYS`: opens the sealed signing secrets; the same keyring as the API's. */
  encryptionKeys: EncryptionKeyring;
  /** Tests only (`HERALD_TEST_CRASH_AT`): the step at which the process SIGKILLs itself. */
  testCrashAt: DispatcherStep | undefined;
  webhooks: DispatcherSettings &
    Required<Pick<DispatcherSettings, 'concurrency' | 'endpointConcurrency' | 'pollIntervalMs'>>;
}

/**
 * Parses and validates the environment. The only reader of `process.env` in the dispatcher.
 * @throws InvalidConfigError with one line per bad variable
 */
export function loadDispatcherConfig(env: Record<string, string | undefined> = process.env): DispatcherConfig {
  const parsed = parseEnv(EnvSchema, env);
  return {
    env: parsed.NODE_ENV,
    logLevel: parsed.LOG_LEVEL,
    http: { host: parsed.HOST, port: parsed.PORT, shutdownGraceMs: parsed.SHUTDOWN_GRACE_MS },
    databaseUrl: parsed.DATABASE_URL,
    databasePoolMax: parsed.DATABASE_POOL_MAX,
    databasePreparedStatements: parsed.DATABASE_PREPARED_STATEMENTS,
    redisUrl: parsed.REDIS_URL,
    redisPrefix: parsed.HERALD_REDIS_PREFIX,
    encryptionKeys: parsed.HERALD_ENCRYPTION_KEYS,
    testCrashAt: parsed.HERALD_TEST_CRASH_AT,
    webhooks: {
      timeoutMs: parsed.WEBHOOK_TIMEOUT_MS,
      retryBaseMs: parsed.WEBHOOK_RETRY_BASE_MS,
      retryHorizonMs: parsed.WEBHOOK_RETRY_HORIZON,
      allowPrivateUrls: parsed.WEBHOOK_ALLOW_PRIVATE_URLS,
      disableAfterMs: parsed.WEBHOOK_DISABLE_AFTER,
      retentionMs: parsed.WEBHOOK_RETENTION,
      concurrency: parsed.WEBHOOK_CONCURRENCY,
      orgConcurrency: parsed.TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT,
      endpointConcurrency: parsed.WEBHOOK_ENDPOINT_CONCURRENCY,
      pollIntervalMs: parsed.WEBHOOK_POLL_INTERVAL_MS,
    },
  };
}
