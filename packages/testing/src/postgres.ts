import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';

/** Every test schema's name starts with this, then the run's start time, then a per-run id. */
export const TEST_SCHEMA_PREFIX = 'herald_test_';
/** Schemas of runs older than this (crashed, or killed before their teardown) are dropped at the next run. */
const STALE_RUN_AGE_MS = 6 * 3_600_000;

export interface TestSchema {
  /** DATABASE_URL whose connections use only this schema (via `search_path`). */
  url: string;
  schema: string;
  /**
   * Kept for symmetry; the schema is actually dropped with all of its run's schemas when the run ends.
   * Dropping a schema while another test file's migrator introspects the catalog makes that migrator
   * fail with "schema … does not exist", so no schema is dropped while tests run.
   */
  drop(): Promise<void>;
}

/** `herald_test_<run start, base 36>_<random>_`: what every schema of one `vitest run` starts with. */
export function newRunSchemaPrefix(now = Date.now()): string {
  return `${TEST_SCHEMA_PREFIX}${now.toString(36)}_${randomBytes(3).toString('hex')}_`;
}

/**
 * Creates an empty schema for one test file, so runs (and files within a run) never see each other's
 * rows or migrations, and returns a URL that points every connection at it.
 */
export async function createTestSchema(baseUrl: string): Promise<TestSchema> {
  const schema = `${inject('schemaPrefix')}${randomBytes(4).toString('hex')}`;
  await withClient(baseUrl, (client) => client.query(`create schema "${schema}"`));
  const url = new URL(baseUrl);
  url.searchParams.set('options', `-c search_path=${schema}`);
  return { url: url.toString(), schema, drop: async () => {} };
}

/** Drops this run's schemas, and those of runs that started long ago and never cleaned up. */
export async function dropTestSchemas(baseUrl: string, runPrefix: string, now = Date.now()): Promise<void> {
  await withClient(baseUrl, async (client) => {
    const { rows } = await client.query<{ name: string }>(
      'select nspname as name from pg_namespace where nspname like $1',
      [`${TEST_SCHEMA_PREFIX}%`],
    );
    for (const { name } of rows) {
      const startedAt = Number.parseInt(name.slice(TEST_SCHEMA_PREFIX.length).split('_')[0] ?? '', 36);
      const stale = Number.isFinite(startedAt) && now - startedAt > STALE_RUN_AGE_MS;
      if (name.startsWith(runPrefix) || stale) await client.query(`drop schema if exists "${name}" cascade`);
    }
  });
}

async function withClient<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}
