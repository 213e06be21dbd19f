import { randomBytes } from 'node:crypto';
import pg from 'pg';

export interface TestSchema {
  /** DATABASE_URL whose connections use only this schema (via `search_path`). */
  url: string;
  schema: string;
  /** Drops the schema and everything in it. */
  drop(): Promise<void>;
}

/**
 * Creates an empty schema for one test file, so runs (and files within a run) never see each other's
 * rows or migrations, and returns a URL that points every connection at it.
 */
export async function createTestSchema(baseUrl: string): Promise<TestSchema> {
  const schema = `herald_test_${randomBytes(6).toString('hex')}`;
  await withClient(baseUrl, (client) => client.query(`create schema "${schema}"`));
  const url = new URL(baseUrl);
  url.searchParams.set('options', `-c search_path=${schema}`);
  return {
    url: url.toString(),
    schema,
    drop: () =>
      withClient(baseUrl, (client) => client.query(`drop schema if exists "${schema}" cascade`)).then(() => {}),
  };
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
