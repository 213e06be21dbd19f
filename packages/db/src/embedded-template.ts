import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/**
 * A pre-initialised embedded data directory. Creating a PGlite data directory runs initdb
 * and then every migration: seconds of a first start. `pnpm start`'s build step (deploy/build/start-cli.ts,
 * with embedded-template-build.ts) does that once into a template, and a first start copies it into the
 * fresh data directory, so the migration run at start finds nothing to do. Layout:
 *
 *   <template>/pgdata/        a closed, migrated PGlite data directory
 *   <template>/template.json  {@link EmbeddedTemplateMeta}
 *
 * The template holds no secret and no data: the development secret lives beside `pgdata` in
 * HERALD_DATA_DIR, written at first start. A template that is missing, built for other migrations, or
 * damaged is not used: the caller creates the directory as before (initdb + migrations).
 */

/** The file describing a template, beside its `pgdata/`. */
export const EMBEDDED_TEMPLATE_META = 'template.json';
/** The data directory inside a template. */
export const EMBEDDED_TEMPLATE_PGDATA = 'pgdata';

export interface EmbeddedTemplateMeta {
  /** What the build step compares to decide whether to rebuild (migration files and contents, PGlite version). */
  key: string;
  /** The migrations applied to it, in order; used only when equal to the running code's list. */
  migrations: string[];
  /** Regular files under `pgdata/` and their total bytes: a template short of either is damaged. */
  files: number;
  bytes: number;
}

export type TemplateCopy = { copied: true } | { copied: false; reason: string };

/** The meta of the template in `dir`, or undefined when there is none (or it does not parse). */
export function readEmbeddedTemplateMeta(dir: string): EmbeddedTemplateMeta | undefined {
  try {
    const meta = JSON.parse(readFileSync(join(dir, EMBEDDED_TEMPLATE_META), 'utf8')) as Partial<EmbeddedTemplateMeta>;
    const valid =
      typeof meta.key === 'string' &&
      Array.isArray(meta.migrations) &&
      typeof meta.files === 'number' &&
      typeof meta.bytes === 'number';
    return valid ? (meta as EmbeddedTemplateMeta) : undefined;
  } catch {
    return undefined;
  }
}

/** Regular files under `dir` and their total size. */
export function measureTree(dir: string): { files: number; bytes: number } {
  let files = 0;
  let bytes = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    files++;
    bytes += statSync(join(entry.parentPath, entry.name)).size;
  }
  return { files, bytes };
}

/**
 * Copies the template in `template` to `dataDir`, which must not exist or be empty, when it was built
 * with exactly `migrations` (the running code's list, in order). The copy is made
 * beside `dataDir` and renamed onto it, so an interrupted copy never leaves a half data directory.
 * Never throws: when the template can't be used, returns why and leaves `dataDir` as it was.
 */
export function copyEmbeddedTemplate(template: string, dataDir: string, expected: readonly string[]): TemplateCopy {
  const meta = readEmbeddedTemplateMeta(template);
  if (!meta) return { copied: false, reason: `no template at ${template}` };
  if (meta.migrations.join('\n') !== expected.join('\n')) {
    return {
      copied: false,
      reason: `template is stale: built with ${meta.migrations.length} migrations, this build has ${expected.length} (others or in another order)`,
    };
  }
  const pgdata = join(template, EMBEDDED_TEMPLATE_PGDATA);
  try {
    const found = existsSync(join(pgdata, 'PG_VERSION')) ? measureTree(pgdata) : undefined;
    if (found?.files !== meta.files || found.bytes !== meta.bytes) {
      return {
        copied: false,
        reason: `template is damaged: ${pgdata} does not hold what ${EMBEDDED_TEMPLATE_META} lists`,
      };
    }
  } catch (error) {
    return { copied: false, reason: `template is unreadable: ${(error as Error).message}` };
  }
  try {
    if (existsSync(dataDir) && readdirSync(dataDir).length > 0) {
      return { copied: false, reason: `${dataDir} is not empty` };
    }
  } catch (error) {
    return { copied: false, reason: `${dataDir} is unreadable: ${(error as Error).message}` };
  }
  const partial = join(dirname(dataDir), `.${basename(dataDir)}.${process.pid}.copying`);
  try {
    mkdirSync(dirname(dataDir), { recursive: true });
    cpSync(pgdata, partial, { recursive: true, errorOnExist: true, force: false });
    renameSync(partial, dataDir);
    return { copied: true };
  } catch (error) {
    rmSync(partial, { recursive: true, force: true });
    return { copied: false, reason: `copying the template failed: ${(error as Error).message}` };
  }
}
