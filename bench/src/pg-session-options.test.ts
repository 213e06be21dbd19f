import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { withSessionSettings } from './pg-session-options.js';

// BENCH_DISPATCHER_PG_OPTIONS goes through this to the dispatcher's connection URL: checked on a real
// PostgreSQL session, which must see both the URL's own options and the added ones.
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

async function show(url: string, names: string[]): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const values: string[] = [];
    for (const name of names) values.push((await client.query(`show ${name}`)).rows[0][name]);
    return values;
  } finally {
    await client.end();
  }
}

describe('withSessionSettings', () => {
  it('adds settings a PostgreSQL session then has, keeping the options the URL already had', async () => {
    const own = new URL(base);
    own.searchParams.set('options', '-c search_path=bench_session_options_test');
    const url = withSessionSettings(own.toString(), '-c statement_timeout=1234 -c lock_timeout=567');
    expect(await show(url, ['search_path', 'statement_timeout', 'lock_timeout'])).toEqual([
      'bench_session_options_test',
      '1234ms',
      '567ms',
    ]);
  });

  it('leaves the URL untouched without settings', () => {
    expect(withSessionSettings(base, undefined)).toBe(base);
    expect(withSessionSettings(base, '  ')).toBe(base);
  });

  it('a setting PostgreSQL does not know fails the connection, naming it', async () => {
    const url = withSessionSettings(base, '-c no_such_setting_here=1');
    await expect(show(url, ['server_version'])).rejects.toThrow(/no_such_setting_here/);
  });
});
