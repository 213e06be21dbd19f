import type { TestProject } from 'vitest/node';
import { dropTestSchemas, newRunSchemaPrefix } from './postgres.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A PostgreSQL server URL; each test file makes its own schema in it (see `createTestSchema`). */
    databaseUrl: string;
    /** A Redis server URL; tests keep apart by unique channel, key and organisation names. */
    redisUrl: string;
    /** Prefix of this run's PostgreSQL schemas (see `createTestSchema`). */
    schemaPrefix: string;
  }
}

/**
 * Runs once per `vitest run`. Tests use the PostgreSQL at DATABASE_URL and the Redis at REDIS_URL (CI:
 * the local servers); where unset, testcontainers starts them (needs Docker). Nothing is mocked.
 */
export default async function setup(project: TestProject) {
  const stops: Array<() => Promise<unknown>> = [];
  let databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:16-alpine').start();
    databaseUrl = container.getConnectionUri();
    stops.push(() => container.stop());
  }
  let redisUrl = process.env.REDIS_URL;
  if (!redisUrl) {
    const { RedisContainer } = await import('@testcontainers/redis');
    const container = await new RedisContainer('redis:7-alpine').start();
    redisUrl = container.getConnectionUrl();
    stops.push(() => container.stop());
  }
  const schemaPrefix = newRunSchemaPrefix();
  await dropTestSchemas(databaseUrl, schemaPrefix);
  project.provide('databaseUrl', databaseUrl);
  project.provide('redisUrl', redisUrl);
  project.provide('schemaPrefix', schemaPrefix);
  const url = databaseUrl;
  return async () => {
    await dropTestSchemas(url, schemaPrefix);
    await Promise.all(stops.map((stop) => stop()));
  };
}
