import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiProcess, runApiExpectingExit, startApiProcess } from './support/api-process.js';

// Embedded mode is one process per data directory: PGlite keeps the database in its process's memory, so
// two servers on one directory would each see only their own writes and the last to stop would win.

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

let dataDir: string;
const running: ApiProcess[] = [];

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'herald-embedded-lock-'));
});

afterAll(async () => {
  for (const api of running) await api.stop('SIGKILL');
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

async function start(): Promise<{ api: ApiProcess; token: string }> {
  const api = await startApiProcess({ HERALD_DATA_DIR: dataDir });
  running.push(api);
  const token = (await api.waitForStderr(/Bearer ([\w-]+\.[\w-]+\.[\w-]+)/))[1]!;
  return { api, token };
}

const titles = async (baseUrl: string, token: string) =>
  (await graphql(baseUrl, token, '{ posts(orgId: "demo", first: 50) { edges { node { title } } } }')).data.posts.edges
    .map((edge: { node: { title: string } }) => edge.node.title)
    .sort();

/** `pnpm migrate` on the same directory, as a user would run it. */
async function migrate(): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, ['--import', TSX_LOADER, 'apps/api/src/migrate-cli.ts'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HERALD_DATA_DIR: dataDir },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const [code] = await once(child, 'exit');
  return { code: code as number | null, stderr };
}

describe('one server per embedded data directory', () => {
  it('refuses a second server and pnpm migrate while the first runs, and the first keeps every write', async () => {
    const first = await start();
    const created = await graphql(
      first.api.baseUrl,
      first.token,
      'mutation { createPost(input: { orgId: "demo", title: "written by the first" }) { id } }',
    );
    expect(created.errors).toBeUndefined();

    const second = await runApiExpectingExit({ HERALD_DATA_DIR: dataDir });
    expect(second.code).toBe(1);
    const lines = second.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(`^herald: data directory ${dataDir}/pgdata is in use by process ${first.api.child.pid} \\(since `),
    );

    const migration = await migrate();
    expect(migration.code).toBe(1);
    expect(migration.stderr.trim()).toMatch(
      new RegExp(`^herald: data directory .* in use by process ${first.api.child.pid} `),
    );

    // The first server is unharmed by either attempt, and still takes writes.
    await graphql(
      first.api.baseUrl,
      first.token,
      'mutation { createPost(input: { orgId: "demo", title: "written after the refusals" }) { id } }',
    );
    expect(await titles(first.api.baseUrl, first.token)).toEqual([
      'written after the refusals',
      'written by the first',
    ]);
    expect(await first.api.stop('SIGTERM')).toBe(0);

    // With the server gone, the directory is free again: everything it wrote is there.
    expect((await migrate()).code).toBe(0);
    const restarted = await start();
    expect(await titles(restarted.api.baseUrl, restarted.token)).toEqual([
      'written after the refusals',
      'written by the first',
    ]);
    expect(await restarted.api.stop('SIGINT')).toBe(0);
  }, 240_000);

  it('takes over the lock of a server killed with SIGKILL, keeping what it had committed', async () => {
    const killed = await start();
    await graphql(
      killed.api.baseUrl,
      killed.token,
      'mutation { createPost(input: { orgId: "demo", title: "committed before the kill" }) { id } }',
    );
    expect(await killed.api.stop('SIGKILL')).toBeNull();

    const next = await start();
    expect(await titles(next.api.baseUrl, next.token)).toContain('committed before the kill');
    expect(await next.api.stop('SIGTERM')).toBe(0);
  }, 240_000);
});
