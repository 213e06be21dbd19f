import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync, statSync, utimesSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EMBEDDED_TEMPLATE_DIR,
  isStartBundleStale,
  START_BUNDLE,
  START_BUNDLE_DIR,
} from '../deploy/build/start-bundle.js';
import { isEmbeddedTemplateStale } from '../packages/db/src/embedded-template-build.js';

// `pnpm start` runs the API as one bundle (deploy/build/start-bundle.ts): built here as the start script
// builds it (with the embedded database template beside it), then started like `pnpm start` starts it,
// on a fresh embedded data directory.

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const START_TIMEOUT_MS = 120_000;

let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'herald-start-bundle-'));
  const build = spawn(
    process.execPath,
    ['--experimental-import-meta-resolve', '--import', TSX_LOADER, 'deploy/build/start-cli.ts'],
    // As `pnpm start` in embedded mode: without DATABASE_URL (set for the other tests), which skips the template.
    { cwd: ROOT, env: { ...process.env, DATABASE_URL: '' }, stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const [code] = await once(build, 'exit');
  expect(code).toBe(0);
}, START_TIMEOUT_MS);

afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

describe('the API bundle `pnpm start` runs', () => {
  it('imports third-party packages at the files Node resolves for the workspace sources', () => {
    const bundle = readFileSync(START_BUNDLE, 'utf8');
    // packages/db's PGlite is not reachable from apps/api by package name: the URL is what makes it load.
    expect(bundle).toMatch(/from "file:\/\/[^"]*\/@electric-sql\/pglite\/[^"]*"/);
    expect(bundle).not.toMatch(/from "(graphql|@electric-sql\/pglite|lru-cache)"/);
    expect(existsSync(join(START_BUNDLE_DIR, 'init-embedded-worker.mjs'))).toBe(true);
  });

  it('has the embedded database template beside it, built from the current migrations', () => {
    expect(isEmbeddedTemplateStale(EMBEDDED_TEMPLATE_DIR)).toBe(false);
  });

  it('is rebuilt once a source it was built from is newer', () => {
    expect(isStartBundleStale()).toBe(false);
    const source = join(ROOT, 'apps/api/src/realtime/subscription-groups.ts');
    const { atime, mtime } = statSync(source);
    try {
      const later = new Date(statSync(START_BUNDLE).mtimeMs + 1_000);
      utimesSync(source, later, later);
      expect(isStartBundleStale()).toBe(true);
    } finally {
      utimesSync(source, atime, mtime);
    }
  });

  it(
    'creates a fresh embedded database from the template, serves GraphQL and GraphiQL, and stops on SIGTERM',
    async () => {
      const child = spawn(process.execPath, [START_BUNDLE], {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: '0', HERALD_DATA_DIR: dataDir },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const exited = once(child, 'exit');
      let buffered = '';
      try {
        const port = await new Promise<number>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error('not listening in time')), START_TIMEOUT_MS);
          child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
            buffered += chunk;
            const match = /"port":(\d+),"msg":"herald api listening"/.exec(buffered);
            if (match) {
              clearTimeout(timer);
              resolve(Number(match[1]));
            }
          });
          child.stderr.resume();
          void exited.then(() => reject(new Error('exited before listening')));
        });
        const base = `http://127.0.0.1:${port}`;
        expect(existsSync(join(dataDir, 'pgdata', 'PG_VERSION'))).toBe(true);
        // Copied, not created by initdb; the migration run found nothing to do.
        expect(buffered).toContain('"msg":"embedded database created from the template"');
        expect(buffered).not.toContain('"msg":"migration"');
        // The development secret is this data directory's own, not the template's.
        expect(existsSync(join(dataDir, 'dev-jwt-secret'))).toBe(true);
        const response = await fetch(`${base}/graphql`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ query: '{ __typename }' }),
        });
        expect(await response.json()).toEqual({ data: { __typename: 'Query' } });
        const graphiql = await fetch(`${base}/graphql`, { headers: { accept: 'text/html' } });
        expect(await graphiql.text()).toContain('<title>Herald</title>');
      } finally {
        child.kill('SIGTERM');
        const [code] = await exited;
        expect(code).toBe(0);
      }
    },
    START_TIMEOUT_MS,
  );
});
