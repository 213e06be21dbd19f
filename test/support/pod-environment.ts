import { randomUUID } from 'node:crypto';
import { signToken } from '@herald/auth';
import { createTestSchema, type TestSchema } from '@herald/testing';
import { inject } from 'vitest';

/** What API pods of one test share: a fresh schema, their environment, and a writer's token. */
export interface PodEnvironment {
  schema: TestSchema;
  /** For `startApiProcess`: the schema, the run's Redis under a key prefix of the test's own, the JWT secret. */
  env: Record<string, string>;
  /** A writer of `orgId`, signed with `jwtSecret`. */
  writer: string;
}

/**
 * Creates a test schema on the run's PostgreSQL, signs a writer token for `orgId`, and builds the
 * environment of API pods on that schema and the run's Redis, their keys under `<redisPrefix>-<uuid>:`
 * (so nothing another test writes reaches them). `socketsPerUser` sets TENANT_SOCKETS_PER_USER
 * (0: no cap); `shutdownGraceMs` sets SHUTDOWN_GRACE_MS.
 */
export async function createPodEnvironment(options: {
  redisPrefix: string;
  jwtSecret: string;
  orgId: string;
  shutdownGraceMs: number;
  socketsPerUser?: number;
}): Promise<PodEnvironment> {
  const schema = await createTestSchema(inject('databaseUrl'));
  const writer = await signToken(options.jwtSecret, { sub: 'writer', orgs: [options.orgId] });
  const env: Record<string, string> = {
    DATABASE_URL: schema.url,
    REDIS_URL: inject('redisUrl'),
    HERALD_REDIS_PREFIX: `${options.redisPrefix}-${randomUUID()}:`,
    JWT_SECRET: options.jwtSecret,
    SHUTDOWN_GRACE_MS: String(options.shutdownGraceMs),
  };
  if (options.socketsPerUser !== undefined) env.TENANT_SOCKETS_PER_USER = String(options.socketsPerUser);
  return { schema, env, writer };
}
