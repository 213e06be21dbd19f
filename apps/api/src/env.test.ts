import { InvalidConfigError } from '@herald/config';
import { describe, expect, it } from 'vitest';
import { loadApiConfig } from './env.js';

function configError(env: Record<string, string>): string[] {
  try {
    loadApiConfig(env);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidConfigError);
    return (error as InvalidConfigError).lines;
  }
  throw new Error('expected the configuration to be refused');
}

const SECRET = 'x'.repeat(32);
const KEYS = `k1:${Buffer.alloc(32, 1).toString('base64')}`;

describe('document limits', () => {
  it('cost and directive limits default to 5000 and 50 and can be changed', () => {
    expect(loadApiConfig({}).graphql).toMatchObject({ maxCost: 5_000, maxDirectives: 50 });
    const config = loadApiConfig({ MAX_QUERY_COST: '20000', MAX_QUERY_DIRECTIVES: '10' });
    expect(config.graphql).toMatchObject({ maxCost: 20_000, maxDirectives: 10 });
    expect(configError({ MAX_QUERY_COST: '0' })[0]).toMatch(/^MAX_QUERY_COST/);
  });
});

describe('JWT_JWKS_URL', () => {
  it('must be https:// outside development, with one line naming the variable', () => {
    expect(configError({ NODE_ENV: 'production', JWT_JWKS_URL: 'http://idp.example/jwks.json' })).toEqual([
      'JWT_JWKS_URL: must be an https:// URL outside development',
    ]);
    const https = loadApiConfig({ NODE_ENV: 'production', JWT_JWKS_URL: 'https://idp.example/jwks.json' });
    expect(https.auth.key).toEqual({ kind: 'jwks', url: 'https://idp.example/jwks.json' });
  });

  it('may be http:// in development and test configurations (a local identity provider)', () => {
    for (const NODE_ENV of ['development', 'test']) {
      expect(loadApiConfig({ NODE_ENV, JWT_JWKS_URL: 'http://127.0.0.1:8080/jwks.json' }).auth.key).toMatchObject({
        kind: 'jwks',
      });
    }
  });
});

describe('loadApiConfig', () => {
  it('defaults to embedded mode with the documented defaults', () => {
    const config = loadApiConfig({});
    expect(config.mode).toBe('embedded');
    expect(config.http).toMatchObject({ host: '0.0.0.0', port: 4000, maxRequestBodyBytes: 1024 * 1024 });
    expect(config.database).toEqual({ kind: 'embedded', dataDir: './.herald/pgdata' });
    expect(config.auth.key).toBeUndefined();
    expect(config.ws.keepAliveMs).toBe(12_000);
    expect(config.webhooks).toEqual({
      timeoutMs: 10_000,
      retryBaseMs: 5_000,
      retryHorizonMs: 3 * 86_400_000,
      disableAfterMs: 5 * 86_400_000,
      retentionMs: 30 * 86_400_000,
      allowPrivateUrls: true,
      orgConcurrency: 100,
    });
    expect(config.graphql).toMatchObject({ introspection: true, graphiql: true, maxDepth: 12 });
  });

  it('is cluster mode with DATABASE_URL and REDIS_URL, and refuses private webhook URLs by default', () => {
    const config = loadApiConfig({
      DATABASE_URL: 'postgres://db.internal/herald',
      REDIS_URL: 'redis://redis.internal:6379',
      JWT_SECRET: SECRET,
      HERALD_ENCRYPTION_KEYS: KEYS,
    });
    expect(config.mode).toBe('cluster');
    expect(config.database).toMatchObject({ kind: 'postgres', url: 'postgres://db.internal/herald' });
    expect(config.webhooks.allowPrivateUrls).toBe(false);
  });

  it('is single mode with DATABASE_URL alone: PostgreSQL, in-memory pub/sub, private webhook URLs refused', () => {
    const config = loadApiConfig({
      DATABASE_URL: 'postgres://db.internal/herald',
      JWT_SECRET: SECRET,
      HERALD_ENCRYPTION_KEYS: KEYS,
    });
    expect(config.mode).toBe('single');
    expect(config.database).toMatchObject({ kind: 'postgres' });
    expect(config.redisUrl).toBeUndefined();
    expect(config.webhooks.allowPrivateUrls).toBe(false);
  });

  it('prepares statements on PostgreSQL unless DATABASE_PREPARED_STATEMENTS=false (PgBouncer < 1.21)', () => {
    const base = { DATABASE_URL: 'postgres://db.internal/herald', JWT_SECRET: SECRET, HERALD_ENCRYPTION_KEYS: KEYS };
    expect(loadApiConfig(base).database).toMatchObject({ preparedStatements: true });
    expect(loadApiConfig({ ...base, DATABASE_PREPARED_STATEMENTS: 'false' }).database).toMatchObject({
      preparedStatements: false,
    });
  });

  it('gives PostgreSQL queries a 30 s deadline by default, 0 to turn it off, and refuses a negative or non-number one', () => {
    const base = { DATABASE_URL: 'postgres://db.internal/herald', JWT_SECRET: SECRET, HERALD_ENCRYPTION_KEYS: KEYS };
    expect(loadApiConfig(base).database).toMatchObject({ queryTimeoutMs: 30_000 });
    expect(loadApiConfig({ ...base, DATABASE_QUERY_TIMEOUT_MS: '0' }).database).toMatchObject({ queryTimeoutMs: 0 });
    for (const bad of ['-1', 'soon']) {
      const lines = configError({ ...base, DATABASE_QUERY_TIMEOUT_MS: bad });
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^DATABASE_QUERY_TIMEOUT_MS: /);
    }
  });

  it('refuses REDIS_URL without DATABASE_URL with one line naming REDIS_URL', () => {
    const lines = configError({ REDIS_URL: 'redis://redis.internal:6379', JWT_SECRET: SECRET });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^REDIS_URL: set only together with DATABASE_URL/);
  });

  it('masks error details in single and cluster mode unless NODE_ENV=development is set explicitly', () => {
    const single = { DATABASE_URL: 'postgres://db.internal/herald', JWT_SECRET: SECRET, HERALD_ENCRYPTION_KEYS: KEYS };
    const cluster = { ...single, REDIS_URL: 'redis://redis.internal:6379' };
    expect(loadApiConfig(single).graphql.errorDetails).toBe(false);
    expect(loadApiConfig(cluster).graphql.errorDetails).toBe(false);
    expect(loadApiConfig({ ...cluster, NODE_ENV: 'test' }).graphql.errorDetails).toBe(false);
    expect(loadApiConfig({ ...cluster, NODE_ENV: 'development' }).graphql.errorDetails).toBe(true);
    // A laptop: embedded mode shows details unless told it is production.
    expect(loadApiConfig({}).graphql.errorDetails).toBe(true);
    expect(loadApiConfig({ NODE_ENV: 'production' }).graphql.errorDetails).toBe(false);
  });

  it('turns GraphiQL and introspection off in production unless asked', () => {
    expect(loadApiConfig({ NODE_ENV: 'production' }).graphql).toMatchObject({ introspection: false, graphiql: false });
    expect(loadApiConfig({ NODE_ENV: 'production', GRAPHQL_INTROSPECTION: 'true' }).graphql.introspection).toBe(true);
  });

  it('reads a PEM key with escaped newlines', async () => {
    const { generateKeyPair, exportSPKI } = await import('jose');
    const pem = await exportSPKI((await generateKeyPair('ES256')).publicKey);
    const config = loadApiConfig({ JWT_PUBLIC_KEY: pem.replace(/\n/g, '\\n') });
    expect(config.auth.key).toEqual({ kind: 'public-key', pem });
  });

  it.each([
    [{ PORT: 'eighty' }, /^PORT: /],
    [{ PORT: '70000' }, /^PORT: /],
    [{ WS_KEEPALIVE_MS: '45000' }, /^WS_KEEPALIVE_MS: must be at most 30000/],
    [{ WEBHOOK_RETRY_HORIZON: 'forever' }, /^WEBHOOK_RETRY_HORIZON: expected a duration/],
    [{ WEBHOOK_ALLOW_PRIVATE_URLS: 'maybe' }, /^WEBHOOK_ALLOW_PRIVATE_URLS: /],
    [{ DATABASE_URL: 'mysql://x' }, /^DATABASE_URL: expected a postgres:\/\/ URL/],
    [
      { REDIS_URL: 'http://x' },
      /^REDIS_URL: expected a redis:\/\/, rediss:\/\/, redis\+sentinel:\/\/ or redis\+cluster:\/\/ URL, got http:\/\/$/,
    ],
    [{ REDIS_URL: 'redis+sentinel://:secret@s1:26379' }, /^REDIS_URL: redis\+sentinel:\/\/ needs the master name/],
    [{ JWT_SECRET: 'short' }, /^JWT_SECRET: must be at least 32 characters/],
    [{ JWT_PUBLIC_KEY: 'not a key' }, /^JWT_PUBLIC_KEY: expected a PEM-encoded public key/],
    [{ DATABASE_URL: 'postgres://db/herald' }, /^JWT_SECRET: required in cluster mode/],
    [{ JWT_SECRET: SECRET, JWT_JWKS_URL: 'https://id.example/jwks' }, /^JWT_JWKS_URL: set only one of/],
    [
      { DATABASE_URL: 'postgres://db/herald', JWT_SECRET: SECRET },
      /^HERALD_ENCRYPTION_KEYS: required when DATABASE_URL/,
    ],
    [{ HERALD_ENCRYPTION_KEYS: 'k1:abc' }, /^HERALD_ENCRYPTION_KEYS: entry 1 \("k1"\): the key must be 32 bytes/],
  ])('refuses %j with one line naming the variable', (env, line) => {
    const lines = configError(env);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(line);
  });

  it('names every bad variable at once', () => {
    expect(configError({ PORT: 'x', WS_KEEPALIVE_MS: '0' }).map((line) => line.split(':')[0])).toEqual([
      'PORT',
      'WS_KEEPALIVE_MS',
    ]);
  });

  it('reads the subscription history settings, 1000 events for 1 h by default', () => {
    expect(loadApiConfig({}).subscriptionHistory).toEqual({ size: 1_000, ttlMs: 3_600_000 });
    expect(loadApiConfig({}).redisPrefix).toBe('herald:');
    expect(
      loadApiConfig({ SUBSCRIPTION_HISTORY_SIZE: '0', SUBSCRIPTION_HISTORY_TTL: '15m', HERALD_REDIS_PREFIX: 'h2:' }),
    ).toMatchObject({ subscriptionHistory: { size: 0, ttlMs: 900_000 }, redisPrefix: 'h2:' });
  });

  it('refuses a bad history size or TTL with one line naming the variable', () => {
    expect(configError({ SUBSCRIPTION_HISTORY_SIZE: '-1' })[0]).toMatch(/^SUBSCRIPTION_HISTORY_SIZE/);
    expect(configError({ SUBSCRIPTION_HISTORY_SIZE: 'lots' })[0]).toMatch(/^SUBSCRIPTION_HISTORY_SIZE/);
    expect(configError({ SUBSCRIPTION_HISTORY_TTL: 'an hour' })[0]).toMatch(/^SUBSCRIPTION_HISTORY_TTL/);
  });
});

describe('tenant quotas', () => {
  it('default to 1000 operations and 100 publishes a second, 100 sockets per user, 10000 subscriptions', () => {
    expect(loadApiConfig({}).tenantLimits).toEqual({
      operationsPerSecond: 1_000,
      publishesPerSecond: 100,
      socketsPerUser: 100,
      subscriptions: 10_000,
      webhookAttemptsInFlight: 100,
    });
    expect(loadApiConfig({ TENANT_OPERATIONS_PER_SECOND: '0' }).tenantLimits.operationsPerSecond).toBe(0);
  });

  it('refuse a negative, fractional or absurd value with one line naming the variable', () => {
    for (const value of ['-1', '1.5', '10000001', 'lots']) {
      expect(configError({ TENANT_PUBLISHES_PER_SECOND: value })[0]).toMatch(/^TENANT_PUBLISHES_PER_SECOND/);
      expect(configError({ TENANT_CONCURRENT_OPERATIONS_PER_POD: value })[0]).toMatch(
        /^TENANT_CONCURRENT_OPERATIONS_PER_POD/,
      );
    }
  });

  it('give each tenant 4 concurrent HTTP operations per pod by default; 0 turns the turns off', () => {
    expect(loadApiConfig({}).concurrentOperationsPerPod).toBe(4);
    expect(loadApiConfig({ TENANT_CONCURRENT_OPERATIONS_PER_POD: '0' }).concurrentOperationsPerPod).toBe(0);
  });
});
