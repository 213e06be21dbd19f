import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runApiExpectingExit, startApiProcess } from './support/api-process.js';

// `pnpm start` with nothing configured: embedded PostgreSQL in a data directory, a generated development
// secret, and a printed token. Run as real processes, restarted like a user would.

let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'herald-embedded-'));
});

afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

async function graphql(baseUrl: string, token: string, query: string) {
  const response = await fetch(`${baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query }),
  });
  return (await response.json()) as { data?: any; errors?: unknown[] };
}

describe('embedded mode', () => {
  it('prints GraphiQL and a development token, and keeps posts and the secret across a restart', async () => {
    const first = await startApiProcess({ HERALD_DATA_DIR: dataDir });
    const token = (await first.waitForStderr(/Bearer ([\w-]+\.[\w-]+\.[\w-]+)/))[1];
    expect(first.stderr()).toContain(`GraphiQL:  http://127.0.0.1:${first.port}/graphql`);

    const me = await graphql(first.baseUrl, token!, '{ me { id orgs } }');
    expect(me.data.me).toEqual({ id: 'demo-user', orgs: ['demo'] });
    const created = await graphql(
      first.baseUrl,
      token!,
      'mutation { createPost(input: { orgId: "demo", title: "survives restarts" }) { id } }',
    );
    const postId = created.data.createPost.id as string;
    await graphql(first.baseUrl, token!, `mutation { publishPost(id: "${postId}") { id } }`);
    expect(await first.stop('SIGTERM')).toBe(0);

    const second = await startApiProcess({ HERALD_DATA_DIR: dataDir });
    try {
      // The same development secret is reused, so the first run's token still works.
      const after = await graphql(second.baseUrl, token!, `{ post(id: "${postId}") { title status } }`);
      expect(after.data.post).toEqual({ title: 'survives restarts', status: 'PUBLISHED' });
    } finally {
      expect(await second.stop('SIGINT')).toBe(0);
    }
  }, 180_000);
});

describe('configuration errors', () => {
  it.each([
    [{ WS_KEEPALIVE_MS: '45000' }, 'WS_KEEPALIVE_MS'],
    [{ PORT: 'http' }, 'PORT'],
    [{ DATABASE_URL: 'postgres://127.0.0.1:1/none' }, 'JWT_SECRET'],
    [{ REDIS_URL: 'redis://127.0.0.1:1' }, 'REDIS_URL'],
  ])('%j stops start-up with exit 1 and one line naming %s', async (env, variable) => {
    const { code, stderr } = await runApiExpectingExit(env);
    expect(code).toBe(1);
    const lines = stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^herald: invalid configuration: ${variable}: `));
  });
});
