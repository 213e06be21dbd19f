import { randomUUID } from 'node:crypto';
import { signToken } from '@herald/auth';
import { createOwnDatabase, type OwnDatabase } from '@herald/testing';
import { freePort } from '@herald/testing/ports';
import { type ApiProcess, startApiProcess } from './api-process.js';
import { type OwnPostgres, ownPostgres } from './postgres-cluster.js';

/** A first page of an organisation's posts: the read the PostgreSQL fault tests send. */
export const POSTS_QUERY = 'query($orgId: ID!) { posts(orgId: $orgId, first: 5) { edges { node { id } } } }';

/**
 * An API process (single mode) on a PostgreSQL cluster of the test's own, which the test may stop, start,
 * freeze and thaw; with a writer token for one fresh organisation.
 */
export interface ApiOnOwnPostgres {
  cluster: OwnPostgres;
  own: OwnDatabase;
  api: ApiProcess;
  orgId: string;
  /** A writer of `orgId`, signed with the API's JWT_SECRET. */
  token: string;
  /** Stops the API (SIGTERM) and removes the cluster; safe after a partial start. */
  stop(): Promise<void>;
}

export async function startApiOnOwnPostgres(
  jwtSecret: string,
  env: Record<string, string> = {},
): Promise<ApiOnOwnPostgres> {
  const cluster = await ownPostgres(await freePort());
  let api: ApiProcess | undefined;
  const stop = async () => {
    await cluster.thaw().catch(() => {});
    await api?.stop('SIGTERM');
    await cluster.cleanup();
  };
  try {
    await cluster.start();
    const own = await createOwnDatabase(cluster.url);
    const orgId = `org-${randomUUID()}`;
    const token = await signToken(jwtSecret, { sub: 'writer', name: 'Writer', orgs: [orgId] });
    api = await startApiProcess({ DATABASE_URL: own.url, JWT_SECRET: jwtSecret, ...env });
    return { cluster, own, api, orgId, token, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
