import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type BuildOptions, build, type Plugin } from 'esbuild';

/**
 * What `pnpm start` runs: the API as one esbuild bundle, `apps/api/dist/main.js`, instead of its
 * TypeScript transpiled by tsx at run time (tsx and its per-module transforms cost the idle
 * embedded server ~100 MB of RSS). Rebuilt in ~0.3 s whenever a source it was built from, or the
 * lockfile, is newer than it; `pnpm start` stays one command.
 *
 * Unlike the production build (bundle.ts, which ships a pruned `node_modules` beside `dist/`), this
 * bundle runs inside the workspace: each third-party import is written as the absolute URL of the file
 * Node itself resolves for the workspace file that imports it (a package of `packages/db` is not
 * reachable from `apps/api`). The bundle thus loads exactly the files, and module instances, the
 * TypeScript sources load under tsx. That resolution needs `import.meta.resolve(specifier, parent)`,
 * which Node 20 offers behind `--experimental-import-meta-resolve` (the `start` script passes it).
 *
 * The bundle sits in `apps/api/dist/`, at the depth of `apps/api/src/`, so what the sources find
 * relative to their own URL (the built console in `apps/console/dist/`) is found from it too. The
 * embedded database's init worker (`packages/db/src/init-embedded-worker.mjs`, loaded by URL beside its
 * importer) is bundled beside it the same way.
 */

/** The repository root (the pnpm workspace). */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const START_BUNDLE_DIR = join(ROOT, 'apps/api/dist');
export const START_BUNDLE = join(START_BUNDLE_DIR, 'main.js');
/**
 * The pre-initialised embedded data directory (packages/db/src/embedded-template.ts) the bundle's
 * `createDatabase` copies on a first start: `embedded-template/` beside the bundle is its default.
 */
export const EMBEDDED_TEMPLATE_DIR = join(START_BUNDLE_DIR, 'embedded-template');
/** The files the bundle was built from, for the staleness check. */
const INPUTS_FILE = join(START_BUNDLE_DIR, 'main.inputs.json');
const LOCKFILE = join(ROOT, 'pnpm-lock.yaml');
const RESOLVE_FLAG = '--experimental-import-meta-resolve';

/** True when the bundle is missing, or any file it was built from (or the lockfile) is newer. */
export function isStartBundleStale(): boolean {
  if (!existsSync(START_BUNDLE) || !existsSync(INPUTS_FILE)) return true;
  const builtAt = statSync(START_BUNDLE).mtimeMs;
  const inputs = JSON.parse(readFileSync(INPUTS_FILE, 'utf8')) as string[];
  return [LOCKFILE, ...inputs.map((input) => join(ROOT, input))].some(
    (file) => !existsSync(file) || statSync(file).mtimeMs > builtAt,
  );
}

/** Builds `apps/api/dist/main.js` and the init worker beside it; returns the bundle's input count. */
export async function buildStartBundle(): Promise<{ inputs: number }> {
  if (!process.execArgv.includes(RESOLVE_FLAG)) {
    throw new Error(`run with node ${RESOLVE_FLAG}: third-party imports are resolved as Node resolves them`);
  }
  const common: BuildOptions = {
    absWorkingDir: ROOT,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20.20',
    // Error classes and GraphQL types are told apart by name; bundling must not rename them.
    keepNames: true,
    sourcemap: 'linked',
    sourcesContent: false,
    metafile: true,
    write: false,
    logLevel: 'warning',
    plugins: [installedFiles()],
  };
  const [main, worker] = await Promise.all([
    build({ ...common, entryPoints: { main: 'apps/api/src/main.ts' }, outdir: START_BUNDLE_DIR }),
    build({
      ...common,
      entryPoints: { 'init-embedded-worker': 'packages/db/src/init-embedded-worker.mjs' },
      outdir: START_BUNDLE_DIR,
      outExtension: { '.js': '.mjs' },
    }),
  ]);
  const inputs = Object.keys(main.metafile?.inputs ?? {}).filter((input) => !input.startsWith('node_modules/'));
  // Each file is replaced by a rename (atomic), the bundle itself last: a start (or a second build)
  // running meanwhile sees the old set or the new one, never a half-written file.
  mkdirSync(START_BUNDLE_DIR, { recursive: true });
  const files = [...(worker.outputFiles ?? []), ...(main.outputFiles ?? [])].map(
    (file) => [file.path, file.contents] as const,
  );
  files.push([INPUTS_FILE, Buffer.from(`${JSON.stringify(inputs, null, 2)}\n`)]);
  files.sort(([a], [b]) => Number(a === START_BUNDLE) - Number(b === START_BUNDLE));
  for (const [path, contents] of files) {
    const temporary = `${path}.${process.pid}.tmp`;
    writeFileSync(temporary, contents);
    renameSync(temporary, path);
  }
  return { inputs: inputs.length };
}

/** Every bare import except `@herald/*` (compiled in) becomes the URL of the file Node resolves for it. */
function installedFiles(): Plugin {
  return {
    name: 'herald-installed-files',
    setup(build) {
      build.onResolve({ filter: /^[^./]/ }, (args) => {
        if (args.path.startsWith('@herald/')) return undefined;
        if (isBuiltin(args.path)) return { external: true };
        const importer = pathToFileURL(resolve(ROOT, args.importer)).href;
        try {
          return { path: import.meta.resolve(args.path, importer), external: true };
        } catch (error) {
          return { errors: [{ text: `cannot resolve ${args.path} from ${args.importer}: ${String(error)}` }] };
        }
      });
    },
  };
}
