import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  EMBEDDED_TEMPLATE_META,
  EMBEDDED_TEMPLATE_PGDATA,
  type EmbeddedTemplateMeta,
  measureTree,
  readEmbeddedTemplateMeta,
} from './embedded-template.js';

/**
 * Build side of the embedded template (embedded-template.ts): run by `pnpm start`'s build step, not by
 * the API. Reads the migration sources from disk, so it runs from the workspace (tsx), never bundled.
 * The staleness check runs on every `pnpm start`: it imports nothing but node:* (loading Kysely and the
 * migrations under tsx costs ~0.3 s idle, seconds on a loaded machine); the build imports them when needed.
 */

/** Bump when the template's layout or the way it is built changes. */
const TEMPLATE_FORMAT = 1;
const MIGRATIONS_DIR = fileURLToPath(new URL('./migrations/', import.meta.url));

/**
 * What a template is built from: every file of `migrationsDir` (names and contents) and the PGlite
 * version. A template whose key differs is rebuilt. (PGlite's start parameters are not part of a data
 * directory: the API passes its own at every open.)
 */
export function embeddedTemplateKey(migrationsDir: string = MIGRATIONS_DIR): string {
  const hash = createHash('sha256');
  hash.update(`format ${TEMPLATE_FORMAT}\npglite ${pgliteVersion()}\n`);
  for (const name of readdirSync(migrationsDir).sort()) {
    hash.update(`${name}\n`);
    hash.update(readFileSync(join(migrationsDir, name)));
  }
  return hash.digest('hex').slice(0, 32);
}

/** True when `dir` holds no template, or one built from other migrations or another PGlite. */
export function isEmbeddedTemplateStale(dir: string, key: string = embeddedTemplateKey()): boolean {
  return readEmbeddedTemplateMeta(dir)?.key !== key;
}

/**
 * Builds the template into `dir`: initdb and every migration on a fresh PGlite directory, closed cleanly.
 * Built beside `dir` and swapped in by renames, so a start meanwhile copies the old template or the new
 * one (or, in the instant between, finds none and runs initdb).
 * @returns the migrations applied
 */
export async function buildEmbeddedTemplate(dir: string, key: string = embeddedTemplateKey()): Promise<string[]> {
  const building = join(dirname(dir), `.${basename(dir)}.${process.pid}.building`);
  rmSync(building, { recursive: true, force: true });
  try {
    const pgdata = join(building, EMBEDDED_TEMPLATE_PGDATA);
    mkdirSync(pgdata, { recursive: true });
    // initdb runs in a child process (as on any first start without a template), so neither this build
    // step nor a test building a template keeps initdb's ~700 MB of WebAssembly memory.
    const [{ createDatabase }, { migrateToLatest }] = await Promise.all([
      import('./create-database.js'),
      import('./migrate.js'),
    ]);
    const database = await createDatabase({ kind: 'embedded', dataDir: pgdata, template: null });
    let migrations: string[];
    try {
      migrations = (await migrateToLatest(database.db)).map((result) => result.migrationName);
    } finally {
      await database.close();
    }
    const meta: EmbeddedTemplateMeta = { key, migrations, ...measureTree(pgdata) };
    writeFileSync(join(building, EMBEDDED_TEMPLATE_META), `${JSON.stringify(meta, null, 2)}\n`);
    const old = join(dirname(dir), `.${basename(dir)}.${process.pid}.old`);
    try {
      renameSync(dir, old);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    renameSync(building, dir);
    rmSync(old, { recursive: true, force: true });
    return migrations;
  } finally {
    rmSync(building, { recursive: true, force: true });
  }
}

/** The installed PGlite's version, from the package.json of the file Node resolves for it. */
function pgliteVersion(): string {
  const entry = createRequire(import.meta.url).resolve('@electric-sql/pglite');
  for (let dir = dirname(entry); dir !== dirname(dir); dir = dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === '@electric-sql/pglite') return pkg.version ?? 'unknown';
    } catch {
      // no package.json at this level
    }
  }
  return 'unknown';
}
