import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** Every schema the bench creates starts with this (the test suite's cleanup only touches `herald_test_`). */
export const BENCH_SCHEMA_PREFIX = 'herald_bench_';

export interface BenchSchema {
  /** DATABASE_URL whose connections use only this schema (via `search_path`). */
  url: string;
  schema: string;
  drop(): Promise<void>;
}

/** A fresh PostgreSQL schema for one Herald deployment of the bench, dropped when it ends. */
export async function createBenchSchema(baseUrl: string): Promise<BenchSchema> {
  const schema = `${BENCH_SCHEMA_PREFIX}${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
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

/** Resolves when PostgreSQL at `url` answers. */
export async function pingPostgres(url: string): Promise<void> {
  await withClient(url, (client) => client.query('select 1'));
}

async function withClient<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}
