import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The operators' console (apps/console) is its own app, built by esbuild into static files. The API
 * never imports its source: it serves the built files from a folder, found in this order:
 * 1. `HERALD_CONSOLE_DIR`, when set;
 * 2. `console/` beside the running bundle: the production build (deploy/build) writes `dist/console/`
 *    next to `dist/main.js`;
 * 3. `apps/console/dist/` of the workspace: what `pnpm install` and `pnpm start` build.
 */
const CANDIDATE_DIRS = [
  fileURLToPath(new URL('./console/', import.meta.url)),
  fileURLToPath(new URL('../../console/dist/', import.meta.url)),
];
export const CONSOLE_INDEX_FILE = 'index.html';
/** The console is a few small files; anything bigger in the folder is not ours and is not served. */
const MAX_ASSET_BYTES = 2 * 1024 * 1024;

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
};

export interface ConsoleAsset {
  body: Uint8Array<ArrayBuffer>;
  contentType: string;
}

/** The built console, read once at start: `index.html` and the hashed assets it names. */
export interface ConsoleAssets {
  dir: string;
  index: string;
  /** File name (no folders) → content. Only these names are ever served: no path reaches the disk. */
  files: ReadonlyMap<string, ConsoleAsset>;
}

/** The folder the console is served from, or undefined when no built console is found. */
export function findConsoleDir(configured: string | undefined): string | undefined {
  if (configured) return configured;
  return CANDIDATE_DIRS.find((dir) => existsSync(join(dir, CONSOLE_INDEX_FILE)));
}

/**
 * Reads a built console into memory.
 * @throws Error naming the folder when it has no `index.html` (a configured HERALD_CONSOLE_DIR that is wrong)
 */
export function loadConsoleAssets(dir: string): ConsoleAssets {
  const indexPath = join(dir, CONSOLE_INDEX_FILE);
  if (!existsSync(indexPath)) throw new Error(`no ${CONSOLE_INDEX_FILE} in ${dir}: build the console first`);
  const files = new Map<string, ConsoleAsset>();
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const contentType = CONTENT_TYPES[extname(entry.name)];
    if (!entry.isFile() || entry.name === CONSOLE_INDEX_FILE || !contentType) continue;
    const path = join(dir, entry.name);
    if (statSync(path).size > MAX_ASSET_BYTES) continue;
    files.set(entry.name, { body: new Uint8Array(readFileSync(path)), contentType });
  }
  return { dir, index: readFileSync(indexPath, 'utf8'), files };
}
