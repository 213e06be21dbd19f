import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** Every database a fault test creates starts with this, so the test can only ever touch its own. */
export const OWN_DATABASE_PREFIX = 'herald_faults_';

/**
 * A PostgreSQL database of the test's own on a shared server, for fault tests that terminate
 * connections: `terminateBackends` ends only the backends of this database (`WHERE datname = …`), the
 * way a failover or `pg_terminate_backend` would, and never another test's or another helper's.
 */
export interface OwnDatabase {
  /** DATABASE_URL of the new, empty database. */
  url: string;
  name: string;
  /** Terminates every backend connected to this database; resolves with how many there were. */
  terminateBackends(): Promise<number>;
  /** How many backends are connected to this database now. */
  backendCount(): Promise<number>;
  /** Drops the database (its remaining connections are terminated first). Idempotent. */
  drop(): Promise<void>;
}

/** Creates `herald_faults_<random>` on the server of `baseUrl`. */
export async function createOwnDatabase(baseUrl: string): Promise<OwnDatabase> {
  const name = `${OWN_DATABASE_PREFIX}${randomBytes(5).toString('hex')}`;
  const admin = new URL(baseUrl);
  admin.pathname = '/postgres';
  admin.search = '';
  const adminUrl = admin.toString();
  await withClient(adminUrl, (client) => client.query(`create database "${name}"`));
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  url.search = '';
  let dropped = false;
  return {
    url: url.toString(),
    name,
    terminateBackends: () =>
      withClient(adminUrl, async (client) => {
        const { rowCount } = await client.query(
          'select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()',
          [name],
        );
        return rowCount ?? 0;
      }),
    backendCount: () =>
      withClient(adminUrl, async (client) => {
        const { rows } = await client.query<{ count: string }>(
          'select count(*) as count from pg_stat_activity where datname = $1',
          [name],
        );
        return Number(rows[0]?.count ?? 0);
      }),
    async drop() {
      if (dropped) return;
      dropped = true;
      // WITH (FORCE) terminates this database's connections only.
      await withClient(adminUrl, (client) => client.query(`drop database if exists "${name}" with (force)`));
    },
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
