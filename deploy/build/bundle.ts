import { existsSync, readFileSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { build, type Plugin } from 'esbuild';
import type { AppBuild } from './apps.js';

/** Workspace packages export TypeScript source; these are compiled into the bundle. */
const WORKSPACE_SCOPE = '@herald/';
/** Runtime floor (package.json `engines`, the Dockerfile's base image). */
const NODE_TARGET = 'node20.20';

export interface BundleResult {
  /** The bundles written, relative to the output folder (`dist/main.js`, …). */
  files: string[];
  /**
   * Third-party packages the bundles import at run time (left external, so they load from
   * `node_modules` exactly as in development), each with the version the sources were built against.
   */
  externals: Map<string, string>;
  /** Entries left out because their source does not exist yet (see `AppEntry.optional`). */
  skipped: string[];
}

/**
 * Bundles each entry of `app` into `<outDir>/dist/<name>.js` (ESM, with source maps): `@herald/*`
 * workspace packages are compiled in, every other package stays an import.
 *
 * Why not bundle third-party packages too: several load files relative to their own folder at run time
 * (PGlite's WebAssembly and data files, pino's worker files), and `graphql` must be one module instance
 * shared with Pothos and Yoga. Keeping them external keeps them byte-for-byte what the tests ran.
 *
 * @throws when an entry is missing, esbuild reports an error, or one package is imported at two versions
 *   (one `node_modules/<name>` next to the bundle can serve only one).
 */
export async function bundleApp(options: { root: string; app: AppBuild; outDir: string }): Promise<BundleResult> {
  const { root, app, outDir } = options;
  const entries = app.entries.filter((entry) => existsSync(join(root, app.dir, entry.source)));
  const skipped = app.entries.filter((entry) => !entries.includes(entry));
  const missing = skipped.filter((entry) => !entry.optional);
  if (missing.length > 0)
    throw new Error(`missing entry ${missing.map((entry) => join(app.dir, entry.source)).join(', ')}`);

  const versions = new Map<string, Map<string, Set<string>>>();
  const result = await build({
    absWorkingDir: root,
    entryPoints: entries.map((entry) => ({ in: join(app.dir, entry.source), out: entry.name })),
    outdir: join(outDir, 'dist'),
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: NODE_TARGET,
    // Error classes and GraphQL types are told apart by name; bundling must not rename them.
    keepNames: true,
    sourcemap: 'linked',
    sourcesContent: false,
    metafile: true,
    logLevel: 'warning',
    plugins: [externalPackages(versions)],
  });

  const externals = new Map<string, string>();
  for (const output of Object.values(result.metafile.outputs)) {
    for (const imported of output.imports) {
      if (!imported.external || isBuiltin(imported.path)) continue;
      const name = packageName(imported.path);
      const seen = versions.get(name);
      if (!seen) throw new Error(`esbuild kept ${imported.path} external, but it was never resolved`);
      if (seen.size > 1) {
        const detail = [...seen].map(([version, importers]) => `${version} (${[...importers].join(', ')})`);
        throw new Error(`${name} is imported at several versions: ${detail.join('; ')}. Align them.`);
      }
      externals.set(name, [...seen.keys()][0]!);
    }
  }
  return {
    files: Object.keys(result.metafile.outputs)
      .filter((file) => file.endsWith('.js'))
      .map((file) => relative(outDir, resolve(root, file))),
    externals: new Map([...externals].sort(([a], [b]) => a.localeCompare(b))),
    skipped: skipped.map((entry) => entry.name),
  };
}

/** Marks every bare import external except `@herald/*`, noting which version each importer resolves. */
function externalPackages(versions: Map<string, Map<string, Set<string>>>): Plugin {
  return {
    name: 'herald-external-packages',
    setup(build) {
      build.onResolve({ filter: /^[^./]/ }, (args) => {
        if (args.path.startsWith(WORKSPACE_SCOPE)) return undefined;
        if (isBuiltin(args.path)) return { external: true };
        const name = packageName(args.path);
        const version = installedVersion(name, args.resolveDir);
        if (!version) return { errors: [{ text: `cannot find package ${name} from ${args.resolveDir}` }] };
        const byVersion = versions.get(name) ?? new Map<string, Set<string>>();
        const importers = byVersion.get(version) ?? new Set<string>();
        importers.add(args.importer);
        byVersion.set(version, importers);
        versions.set(name, byVersion);
        return { external: true };
      });
    },
  };
}

/** `@scope/name/sub/path` → `@scope/name`; `name/sub` → `name`. */
export function packageName(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
}

/** The version Node would load for `name` from `fromDir` (the nearest `node_modules/<name>` upwards). */
function installedVersion(name: string, fromDir: string): string | undefined {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    const manifest = join(dir, 'node_modules', name, 'package.json');
    if (existsSync(manifest)) return (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version;
    if (dirname(dir) === dir) return undefined;
  }
}
