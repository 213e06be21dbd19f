import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { promisify } from 'node:util';
import pg from 'pg';

/** Where Debian puts each installed PostgreSQL's client programs. */
const DEBIAN_POSTGRES_DIR = '/usr/lib/postgresql';
const DUMP_TIMEOUT_MS = 60_000;
const MAX_DUMP_BYTES = 64 * 1024 * 1024;

/**
 * The plain-SQL `pg_dump` of one schema (its tables and every row), as an operator's backup holds it.
 * Uses the newest `pg_dump` in /usr/lib/postgresql/<major>/bin not older than the server (pg_dump
 * refuses older), else the one on PATH.
 */
export async function dumpSchema(baseUrl: string, schema: string): Promise<string> {
  const client = new pg.Client({ connectionString: baseUrl });
  await client.connect();
  let serverMajor: number;
  try {
    const { rows } = await client.query<{ version: string }>('show server_version_num');
    serverMajor = Math.floor(Number(rows[0]?.version) / 10_000);
  } finally {
    await client.end();
  }
  const installed = existsSync(DEBIAN_POSTGRES_DIR)
    ? readdirSync(DEBIAN_POSTGRES_DIR)
        .map(Number)
        .filter((major) => major >= serverMajor && existsSync(`${DEBIAN_POSTGRES_DIR}/${major}/bin/pg_dump`))
        .sort((a, b) => b - a)
    : [];
  const binary = installed.length > 0 ? `${DEBIAN_POSTGRES_DIR}/${installed[0]}/bin/pg_dump` : 'pg_dump';
  const url = new URL(baseUrl);
  url.searchParams.delete('options');
  const { stdout } = await promisify(execFile)(binary, ['--schema', schema, '--no-owner', url.toString()], {
    timeout: DUMP_TIMEOUT_MS,
    maxBuffer: MAX_DUMP_BYTES,
  });
  return stdout;
}
