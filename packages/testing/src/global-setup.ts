import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A PostgreSQL server URL; each test file makes its own schema in it (see `createTestSchema`). */
    databaseUrl: string;
  }
}

/**
 * Runs once per `vitest run`. Tests use the PostgreSQL at DATABASE_URL (CI: the local server); where it
 * is unset, testcontainers starts one (needs Docker). Nothing is mocked.
 */
export default async function setup(project: TestProject) {
  let databaseUrl = process.env.DATABASE_URL;
  let stop: (() => Promise<unknown>) | undefined;
  if (!databaseUrl) {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:16-alpine').start();
    databaseUrl = container.getConnectionUri();
    stop = () => container.stop();
  }
  project.provide('databaseUrl', databaseUrl);
  return async () => {
    await stop?.();
  };
}
