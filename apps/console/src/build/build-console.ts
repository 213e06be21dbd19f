import { existsSync, readdirSync, statSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { basename, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BuildOptions, build, context } from 'esbuild';

/** The console package's folder (apps/console). */
export const CONSOLE_ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** Where `pnpm --filter @herald/console build` (and `pnpm install`, `pnpm start`) write the console. */
export const DEFAULT_CONSOLE_OUT_DIR = join(CONSOLE_ROOT, 'dist');
const APP_DIR = join(CONSOLE_ROOT, 'src/app');
const ENTRY = join(APP_DIR, 'main.tsx');
const HTML_TEMPLATE = join(APP_DIR, 'index.html');
/** The page the API serves; it names the hashed script and stylesheet. */
export const CONSOLE_INDEX = 'index.html';
/** Browsers the console supports: those with ES2020 and CSS custom properties (every current one). */
const BROWSER_TARGETS = ['es2020', 'chrome100', 'firefox100', 'safari15'];

export interface ConsoleBuildOptions {
  /**
   * Folder to write `index.html` and the hashed assets to; emptied first.
   * @default apps/console/dist
   */
  outDir?: string;
  /**
   * Minify the script and stylesheet (what the API serves in production).
   * @default true
   */
  minify?: boolean;
}

export interface ConsoleBuildResult {
  outDir: string;
  /** Files written, relative to `outDir`, with their size in bytes. */
  files: Record<string, number>;
}

/**
 * Bundles the console (Preact, TSX, one stylesheet) with esbuild into `index.html` plus content-hashed
 * `console-<hash>.js` / `.css`, so the API can cache the assets forever and `index.html` never.
 * @throws when esbuild reports an error (a type error is the typecheck's job, not this one's)
 */
export async function buildConsole(options: ConsoleBuildOptions = {}): Promise<ConsoleBuildResult> {
  const outDir = options.outDir ?? DEFAULT_CONSOLE_OUT_DIR;
  await rm(outDir, { recursive: true, force: true });
  await mkdir(outDir, { recursive: true });
  const result = await build({ ...esbuildOptions(outDir, options.minify ?? true), metafile: true });
  const outputs = Object.keys(result.metafile.outputs).map((file) => basename(file));
  const script = outputs.find((file) => file.endsWith('.js'));
  const stylesheet = outputs.find((file) => file.endsWith('.css'));
  if (!script || !stylesheet) throw new Error(`esbuild wrote no script or stylesheet: ${outputs.join(', ')}`);
  const template = await readFile(HTML_TEMPLATE, 'utf8');
  const html = template.replace('%SCRIPT%', `./${script}`).replace('%STYLESHEET%', `./${stylesheet}`);
  await writeFile(join(outDir, CONSOLE_INDEX), html);
  const files: Record<string, number> = {};
  for (const file of readdirSync(outDir)) files[file] = statSync(join(outDir, file)).size;
  return { outDir, files };
}

/**
 * True when `outDir` has no `index.html` or any source file of the console is newer than it: what
 * `pnpm start` checks to rebuild only when needed.
 */
export function isConsoleBuildStale(outDir: string = DEFAULT_CONSOLE_OUT_DIR): boolean {
  const index = join(outDir, CONSOLE_INDEX);
  if (!existsSync(index)) return true;
  const builtAt = statSync(index).mtimeMs;
  const sources = [join(CONSOLE_ROOT, 'package.json'), ...listFiles(join(CONSOLE_ROOT, 'src'))];
  return sources.some((file) => statSync(file).mtimeMs > builtAt);
}

/** Rebuilds on every change of the sources until the returned function is called (`pnpm dev`). */
export async function watchConsole(outDir: string = DEFAULT_CONSOLE_OUT_DIR): Promise<() => Promise<void>> {
  await buildConsole({ outDir, minify: false });
  const watcher = await context({
    ...esbuildOptions(outDir, false),
    // The dev build keeps stable names so index.html stays valid while esbuild rewrites the files.
    entryNames: 'console-dev',
  });
  await writeFile(
    join(outDir, CONSOLE_INDEX),
    (await readFile(HTML_TEMPLATE, 'utf8'))
      .replace('%SCRIPT%', './console-dev.js')
      .replace('%STYLESHEET%', './console-dev.css'),
  );
  await watcher.watch();
  return () => watcher.dispose();
}

function esbuildOptions(outDir: string, minify: boolean): BuildOptions {
  return {
    absWorkingDir: CONSOLE_ROOT,
    entryPoints: [ENTRY],
    entryNames: 'console-[hash]',
    outdir: outDir,
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: BROWSER_TARGETS,
    jsx: 'automatic',
    jsxImportSource: 'preact',
    minify,
    sourcemap: false,
    legalComments: 'none',
    logLevel: 'warning',
    define: { 'process.env.NODE_ENV': minify ? '"production"' : '"development"' },
  };
}

function listFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? listFiles(path) : [path];
  });
}

/** For log lines: `index.html (1.2 kB), console-….js (24.0 kB)`. */
export function describeBuild(result: ConsoleBuildResult): string {
  const sizes = Object.entries(result.files).map(([file, bytes]) => `${file} (${(bytes / 1024).toFixed(1)} kB)`);
  return `${relative(process.cwd(), result.outDir) || '.'}: ${sizes.join(', ')}`;
}
