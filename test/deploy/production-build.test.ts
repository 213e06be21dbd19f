import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { signToken } from '@herald/auth';
import { createTestSchema, TEST_ENCRYPTION_KEYS, type TestSchema } from '@herald/testing';
import { freePort, waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { APPS, type AppName } from '../../deploy/build/apps.js';
import { findUnresolvedImports } from '../../deploy/build/verify.js';
import { copyBuildContext } from './docker-context.js';
import { type Dockerfile, effective, effectiveEnv, execForm, REPO_ROOT, readDockerfile } from './dockerfile.js';

// The image build without a Docker engine: the build context Docker would send (through .dockerignore),
// the Dockerfile's own install and build commands run in a copy of it, and the result started the way
// the image starts it, with plain `node` and no workspace around it. Everything is written under one
// temporary folder, removed at the end.

/** Install (from the store `pnpm install` filled) + bundle + deploy, on a busy 2-core machine. */
const BUILD_TIMEOUT_MS = 240_000;
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 30_000;
const JWT_SECRET = 'deploy-test-secret-0123456789abcdef';
/** The operator CLI each image ships, run once against the test database. */
const CLI_CHECKS: Record<AppName, { entry: string; args: string[]; prints: string }> = {
  api: { entry: 'migrate', args: [], prints: 'database is up to date' },
  'webhook-dispatcher': { entry: 'dlq', args: ['list'], prints: 'no dead letters' },
};
/** Packages that must never reach a production image. */
const BUILD_ONLY_PACKAGES = ['tsx', 'typescript', 'esbuild', '@esbuild', 'vitest', 'vite', '@biomejs', '@herald'];

let dockerfile: Dockerfile;
let temp: string;
const timings: Record<string, number> = {};

beforeAll(async () => {
  dockerfile = await readDockerfile();
  temp = await mkdtemp(join(tmpdir(), 'herald-deploy-test-'));
  await mkdir(join(temp, 'tmp'));
  const context = join(temp, 'context');
  await copyBuildContext(REPO_ROOT, context);
  const install = dockerfile
    .stage('deps')
    .instructions.filter((instruction) => instruction.keyword === 'RUN' && instruction.args.startsWith('pnpm install'));
  expect(install).toHaveLength(1);
  await timed('install', () => sh(install[0]!.args, context));
}, BUILD_TIMEOUT_MS);

afterAll(async () => {
  console.info(`production build timings (ms): ${JSON.stringify(timings)}`);
  if (temp) await rm(temp, { recursive: true, force: true });
});

for (const appName of Object.keys(APPS) as AppName[]) {
  const app = APPS[appName];
  const exists = existsSync(join(REPO_ROOT, app.dir, 'src/main.ts'));

  describe.skipIf(!exists)(`production build of ${appName}`, () => {
    let out: string;
    let schema: TestSchema;

    beforeAll(async () => {
      // The build stage's command, with the image's /out moved into the temporary folder.
      const [command] = dockerfile
        .stage(`build-${appName}`)
        .instructions.filter((instruction) => instruction.keyword === 'RUN')
        .map((instruction) => instruction.args);
      expect(command).toBe(`pnpm build:prod ${appName} /out`);
      out = join(temp, `out-${appName}`);
      await timed(`build ${appName}`, () => sh(command!.replace(/ \/out$/, ` ${out}`), join(temp, 'context')));
      schema = await createTestSchema(inject('databaseUrl'));
    }, BUILD_TIMEOUT_MS);

    afterAll(async () => {
      await schema?.drop();
    });

    it('writes the bundles, source maps and a package.json, and no TypeScript', async () => {
      const dist = await readdir(join(out, 'dist'));
      for (const entry of app.entries) {
        if (!entry.optional || existsSync(join(REPO_ROOT, app.dir, entry.source)))
          expect(dist).toEqual(expect.arrayContaining([`${entry.name}.js`, `${entry.name}.js.map`]));
      }
      expect(dist.filter((file) => file.endsWith('.ts'))).toEqual([]);
      expect(await readdir(out)).toEqual(['dist', 'node_modules', 'package.json']);
      const manifest = JSON.parse(await readFile(join(out, 'package.json'), 'utf8'));
      expect(manifest).toMatchObject({ name: app.packageName, type: 'module' });
    });

    it('keeps exactly the packages the bundles import, at the versions they were built against', async () => {
      const manifest = JSON.parse(await readFile(join(out, 'package.json'), 'utf8')) as {
        dependencies: Record<string, string>;
      };
      expect(Object.keys(manifest.dependencies).length).toBeGreaterThan(0);
      for (const [name, version] of Object.entries(manifest.dependencies)) {
        const installed = JSON.parse(await readFile(join(out, 'node_modules', name, 'package.json'), 'utf8'));
        expect(installed.version, name).toBe(version);
      }
      const topLevel = await readdir(join(out, 'node_modules'));
      expect(topLevel.filter((name) => BUILD_ONLY_PACKAGES.includes(name))).toEqual([]);
    });

    it('resolves every package the bundles import from inside the build', async () => {
      expect(await findUnresolvedImports(out)).toEqual([]);
    });

    it('holds one copy of graphql, so schema and execution share one module', async () => {
      const copies = await findPackages(join(out, 'node_modules'), 'graphql');
      expect(copies.length).toBeLessThanOrEqual(1);
    });

    it(
      "starts with the image's command and plain node, answers /health and /readiness, stops on SIGTERM with 0",
      async () => {
        const home = join(temp, `home-${appName}`);
        const dataDir = join(temp, `data-${appName}`);
        await mkdir(home);
        const before = await snapshot(out);
        const app = await startBuild(appName, out, {
          HOME: home,
          HERALD_DATA_DIR: dataDir,
          DATABASE_URL: schema.url,
          REDIS_URL: inject('redisUrl'),
          HERALD_REDIS_PREFIX: redisPrefix(schema),
          HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
          ...(appName === 'api' ? { JWT_SECRET } : {}),
        });
        try {
          expect((await fetch(`${app.baseUrl}/readiness`)).status).toBe(200);
          const metrics = await fetch(`${app.baseUrl}/metrics`);
          expect(metrics.status).toBe(200);
          expect(await metrics.text()).toContain('herald_');
          if (appName === 'api') {
            // A real execution: the bundled schema, graphql (external) and the token verifier together.
            const token = await signToken(JWT_SECRET, { sub: 'deploy-test', name: 'Deploy Test', orgs: ['deploy'] });
            const response = await fetch(`${app.baseUrl}/graphql`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
              body: JSON.stringify({ query: '{ me { id } }' }),
            });
            expect(await response.json()).toEqual({ data: { me: { id: 'deploy-test' } } });
            // The console, built into dist/console/ and served from there, with the script its page names.
            const page = await fetch(`${app.baseUrl}/console/`);
            expect(page.status).toBe(200);
            const html = await page.text();
            expect(html).not.toContain('herald-dev-token');
            const script = /src="\.\/(console-\w+\.js)"/.exec(html)?.[1];
            expect(script).toBeDefined();
            const asset = await fetch(`${app.baseUrl}/console/${script}`);
            expect(asset.status).toBe(200);
            expect(asset.headers.get('content-type')).toContain('javascript');
          }
        } finally {
          if (app.running()) app.process.kill('SIGTERM');
        }
        expect(await app.exit(), app.output()).toBe(0);
        // Cluster mode writes nothing but logs (k8s mounts only /tmp writable): not its own folder, not
        // HOME, not the data directory.
        expect(await snapshot(out)).toEqual(before);
        expect(await readdir(home)).toEqual([]);
        expect(existsSync(dataDir)).toBe(false);
      },
      START_TIMEOUT_MS + STOP_TIMEOUT_MS,
    );

    const cli = CLI_CHECKS[appName];
    it.skipIf(!existsSync(join(REPO_ROOT, app.dir, app.entries.find((e) => e.name === cli.entry)!.source)))(
      `runs \`${['node', `dist/${cli.entry}.js`, ...cli.args].join(' ')}\` from the build`,
      async () => {
        // After the start above, which migrated the schema.
        const child = track(
          spawn(process.execPath, [`dist/${cli.entry}.js`, ...cli.args], {
            cwd: out,
            env: {
              PATH: process.env.PATH ?? '',
              NODE_ENV: 'production',
              DATABASE_URL: schema.url,
              REDIS_URL: inject('redisUrl'),
              HERALD_REDIS_PREFIX: redisPrefix(schema),
              HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
              JWT_SECRET,
            },
            stdio: ['ignore', 'pipe', 'pipe'],
          }),
        );
        expect(await child.exit(), child.output()).toBe(0);
        expect(child.output()).toContain(cli.prints);
      },
    );

    if (appName === 'api') {
      it(
        'starts in embedded mode from the build: PGlite loads its WebAssembly and data from node_modules',
        async () => {
          const dataDir = join(temp, 'embedded-data');
          const app = await startBuild(appName, out, { HOME: join(temp, 'tmp'), HERALD_DATA_DIR: dataDir });
          try {
            expect((await fetch(`${app.baseUrl}/readiness`)).status).toBe(200);
          } finally {
            if (app.running()) app.process.kill('SIGTERM');
          }
          expect(await app.exit(), app.output()).toBe(0);
          expect(existsSync(join(dataDir, 'dev-jwt-secret'))).toBe(true);
        },
        START_TIMEOUT_MS + STOP_TIMEOUT_MS,
      );
    }
  });
}

/**
 * Starts a build as its image does (the target's CMD and ENV, with plain node instead of tini) on a
 * free port, and waits until it answers /health with 200.
 */
async function startBuild(appName: AppName, out: string, env: Record<string, string>) {
  const command = execForm(effective(dockerfile, appName, 'CMD') ?? '[]');
  expect(command[0]).toBe('node');
  const port = await freePort();
  const child = track(
    spawn(process.execPath, command.slice(1), {
      cwd: out,
      env: {
        ...effectiveEnv(dockerfile, appName),
        PATH: process.env.PATH ?? '',
        TMPDIR: join(temp, 'tmp'),
        HOST: '127.0.0.1',
        PORT: String(port),
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  const baseUrl = `http://127.0.0.1:${port}`;
  await waitFor(
    `${appName} to answer /health`,
    async () => {
      if (!child.running()) throw new Error(`${appName} exited:\n${child.output()}`);
      return (await fetch(`${baseUrl}/health`).catch(() => undefined))?.status === 200;
    },
    { timeoutMs: START_TIMEOUT_MS, intervalMs: 200 },
  );
  return { ...child, baseUrl };
}

/** Keeps this file's Redis keys apart from other test files'. */
function redisPrefix(schema: TestSchema): string {
  return `herald-deploy-test:${schema.schema}:`;
}

async function timed(label: string, step: () => Promise<void>): Promise<void> {
  const started = performance.now();
  await step();
  timings[label] = Math.round(performance.now() - started);
}

/** Runs `command` as Docker runs a shell-form RUN (`/bin/sh -c`), with temporary files under `temp`. */
async function sh(command: string, cwd: string): Promise<void> {
  const child = track(
    spawn('/bin/sh', ['-c', command], {
      cwd,
      env: { ...process.env, TMPDIR: join(temp, 'tmp') },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  const code = await child.exit(BUILD_TIMEOUT_MS);
  if (code !== 0) throw new Error(`\`${command}\` exited ${code}:\n${child.output()}`);
}

interface Tracked {
  process: ChildProcess;
  /** stdout and stderr so far. */
  output(): string;
  running(): boolean;
  /** Resolves with the exit code (null: killed by a signal); SIGKILLs and rejects after `timeoutMs`. */
  exit(timeoutMs?: number): Promise<number | null>;
}

const children: Tracked[] = [];
afterAll(() => {
  for (const child of children) if (child.running()) child.process.kill('SIGKILL');
});

function track(child: ChildProcess): Tracked {
  let output = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  let running = true;
  const closed = new Promise<number | null>((resolve) =>
    child.once('close', (code) => {
      running = false;
      resolve(code);
    }),
  );
  const tracked: Tracked = {
    process: child,
    output: () => output,
    running: () => running,
    async exit(timeoutMs = STOP_TIMEOUT_MS) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          child.kill('SIGKILL');
          reject(new Error(`process ${child.pid} did not exit within ${timeoutMs} ms:\n${output}`));
        }, timeoutMs);
      });
      try {
        return await Promise.race([closed, timeout]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
  children.push(tracked);
  return tracked;
}

/** Every file under `dir` with its size and modification time. */
async function snapshot(dir: string): Promise<Record<string, string>> {
  const files: Record<string, string> = {};
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const path = join(entry.parentPath, entry.name);
    const stats = await stat(path);
    files[path] = `${stats.size}:${stats.mtimeMs}`;
  }
  return files;
}

/** Folders named `node_modules/<name>` anywhere under `root`. */
async function findPackages(root: string, name: string): Promise<string[]> {
  const entries = await readdir(root, { recursive: true, withFileTypes: true });
  return entries
    .filter((entry) => entry.isDirectory() && entry.name === name && entry.parentPath.endsWith('node_modules'))
    .map((entry) => join(entry.parentPath, entry.name));
}
