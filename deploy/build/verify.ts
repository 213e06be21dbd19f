import { execFile } from 'node:child_process';
import { readdir } from 'node:fs/promises';
import { isBuiltin } from 'node:module';
import { join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { build } from 'esbuild';

export interface UnresolvedImport {
  specifier: string;
  /** Bundles that import it, relative to the output folder. */
  importers: string[];
  /** Why it does not resolve: Node's error, or where it resolved to outside the output folder. */
  reason: string;
}

/**
 * Reads every `dist/*.js` in a production build, lists the packages they import (static, dynamic and
 * `require`), and asks Node to resolve each one from `dist/` as the bundle will at run time. Found only
 * by reading the built files, so it does not trust the build's own bookkeeping.
 *
 * @returns the imports that do not resolve to a file inside `outDir` (empty when the build is complete)
 */
export async function findUnresolvedImports(outDir: string): Promise<UnresolvedImport[]> {
  const distDir = join(outDir, 'dist');
  const bundles = (await readdir(distDir)).filter((file) => file.endsWith('.js')).map((file) => join(distDir, file));
  const importers = new Map<string, string[]>();
  for (const bundle of bundles) {
    const scan = await build({
      entryPoints: [bundle],
      bundle: true,
      write: false,
      metafile: true,
      platform: 'node',
      format: 'esm',
      packages: 'external',
      logLevel: 'silent',
    });
    for (const input of Object.values(scan.metafile.inputs)) {
      for (const imported of input.imports) {
        if (!imported.external || isBuiltin(imported.path)) continue;
        const list = importers.get(imported.path) ?? [];
        importers.set(imported.path, [...list, join('dist', bundle.slice(distDir.length + 1))]);
      }
    }
  }
  if (importers.size === 0) return [];

  // import.meta.resolve of an `--input-type=module` script resolves from the working directory, which is
  // where the bundles are: the same lookup, with the same `import` conditions, as at run time.
  const script = `
    for (const specifier of JSON.parse(process.argv[1])) {
      try { console.log(JSON.stringify({ specifier, url: import.meta.resolve(specifier) })); }
      catch (error) { console.log(JSON.stringify({ specifier, error: error.code ?? error.message })); }
    }`;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--input-type=module', '-e', script, JSON.stringify([...importers.keys()])],
    { cwd: distDir, env: { PATH: process.env.PATH ?? '' } },
  );
  const unresolved: UnresolvedImport[] = [];
  for (const line of stdout.trim().split('\n')) {
    const { specifier, url, error } = JSON.parse(line) as { specifier: string; url?: string; error?: string };
    const path = url?.startsWith('file:') ? fileURLToPath(url) : undefined;
    const reason = error ?? (path?.startsWith(outDir + sep) ? undefined : `resolved outside the build: ${url}`);
    if (reason) unresolved.push({ specifier, importers: importers.get(specifier) ?? [], reason });
  }
  return unresolved;
}
