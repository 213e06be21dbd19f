import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildConsole } from '../../apps/console/src/build/build-console.js';
import { APPS, type AppName } from './apps.js';
import { bundleApp } from './bundle.js';
import { copyProductionClosure } from './prune.js';
import { findUnresolvedImports } from './verify.js';

/** The repository root (the pnpm workspace). */
export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface BuildResult {
  outDir: string;
  /** Bundles written, relative to `outDir`. */
  files: string[];
  /** What the bundles import from `node_modules`: name → version. */
  externals: Map<string, string>;
  /** Package folders copied, relative to `outDir` (`node_modules/pg`, …). */
  packages: string[];
}

/**
 * The production build of one app, as the Dockerfile runs it (`pnpm build:prod <app> /out`) and as
 * `test/deploy` runs it. Needs a workspace installed with `pnpm install --frozen-lockfile`; writes only
 * to `outDir` (which must be empty or absent) and a temporary folder it removes.
 *
 * 1. bundle: esbuild compiles `dist/<entry>.js` with the `@herald/*` workspace packages inlined and
 *    third-party packages left as imports (see `bundleApp`); for the API, the console's static files
 *    into `dist/console/` (see `AppBuild.consoleDir`);
 * 2. install: `pnpm deploy --prod` of the app, from the workspace lockfile, offline (the packages the
 *    install fetched, nothing else) and hoisted (a plain npm-style `node_modules`);
 * 3. prune: copy only the packages the bundles import, and their dependencies (see
 *    `copyProductionClosure`), next to `dist/`, with a `package.json` listing them;
 * 4. verify: every package the bundles import resolves inside `outDir` (see `findUnresolvedImports`).
 *
 * The result runs with plain `node dist/main.js`: no TypeScript tooling, no workspace, no pnpm.
 */
export async function buildApp(appName: AppName, outDirArg: string, log: (line: string) => void): Promise<BuildResult> {
  const app = APPS[appName];
  const outDir = resolve(outDirArg);
  const existing = await readdir(outDir).catch(() => []);
  if (existing.length > 0) throw new Error(`${outDir} is not empty; give a new or empty folder`);
  await mkdir(outDir, { recursive: true });

  log(`bundling ${app.packageName}`);
  const bundle = await bundleApp({ root: REPO_ROOT, app, outDir });
  for (const name of bundle.skipped) log(`skipped entry "${name}": its source does not exist yet`);
  log(`bundled ${bundle.files.join(', ')}; imports ${bundle.externals.size} packages`);
  if (app.consoleDir) {
    const built = await buildConsole({ outDir: join(outDir, app.consoleDir) });
    log(`built the console into ${app.consoleDir}: ${Object.keys(built.files).join(', ')}`);
  }

  const staging = await mkdtemp(join(tmpdir(), `herald-build-${appName}-`));
  try {
    const deployed = join(staging, 'deploy');
    log(`pnpm deploy --prod ${app.packageName}`);
    // --offline: exactly the packages `pnpm install --frozen-lockfile` put in the store, no network.
    // --trust-lockfile: the deploy lockfile is cut from the committed one that install just used; its
    // supply-chain re-check would need registry metadata that an offline build doesn't have.
    await run('pnpm', [
      ...['--filter', app.packageName, 'deploy', deployed],
      ...['--prod', '--frozen-lockfile', '--offline', '--trust-lockfile', '--node-linker=hoisted'],
    ]);
    const packages = await copyProductionClosure(deployed, outDir, bundle.externals);
    log(`kept ${packages.length} packages`);

    const manifest = JSON.parse(await readFile(join(REPO_ROOT, app.dir, 'package.json'), 'utf8')) as {
      version: string;
    };
    const productionManifest = {
      name: app.packageName,
      version: manifest.version,
      private: true,
      type: 'module',
      description: 'Production build of Herald (deploy/build): run with `node dist/main.js`.',
      dependencies: Object.fromEntries(bundle.externals),
    };
    await writeFile(join(outDir, 'package.json'), `${JSON.stringify(productionManifest, null, 2)}\n`);

    const unresolved = await findUnresolvedImports(outDir);
    if (unresolved.length > 0) {
      const lines = unresolved.map((entry) => `${entry.specifier} (${entry.importers.join(', ')}): ${entry.reason}`);
      throw new Error(`imports that would fail at run time:\n  ${lines.join('\n  ')}`);
    }
    return { outDir, files: bundle.files, externals: bundle.externals, packages };
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

async function run(command: string, args: string[]): Promise<void> {
  const child = spawn(command, args, { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const [code] = (await once(child, 'close')) as [number | null];
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} failed (exit ${code}):\n${output}`);
}
