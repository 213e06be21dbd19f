import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type EmbeddedCreation } from './create-database.js';
import {
  copyEmbeddedTemplate,
  EMBEDDED_TEMPLATE_META,
  EMBEDDED_TEMPLATE_PGDATA,
  type EmbeddedTemplateMeta,
  measureTree,
} from './embedded-template.js';
import { buildEmbeddedTemplate, embeddedTemplateKey, isEmbeddedTemplateStale } from './embedded-template-build.js';
import { migrateToLatest } from './migrate.js';
import { migrationProvider } from './migrations/index.js';

// A first embedded start copies a pre-built, migrated data directory instead of running initdb and every
// migration. A template that is stale or damaged must never cost correctness: the start falls
// back to initdb + migrations.

let root: string;
let template: string;
let migrationNames: string[];

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'herald-embedded-template-'));
  template = join(root, 'template');
  migrationNames = Object.keys(await migrationProvider.getMigrations());
  expect(await buildEmbeddedTemplate(template, 'test-key')).toEqual(migrationNames);
});

afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

/** A copy of the built template, changed by `damage`, for one test. */
function templateVariant(name: string, damage: (dir: string) => void): string {
  const dir = join(root, name);
  cpSync(template, dir, { recursive: true });
  damage(dir);
  return dir;
}

/** Opens a fresh data directory from `from`, migrates it, checks it holds Herald's tables, closes it. */
async function startFresh(name: string, from: string) {
  const dataDir = join(root, 'data', name, 'pgdata');
  const created: EmbeddedCreation[] = [];
  const database = await createDatabase(
    { kind: 'embedded', dataDir, template: from },
    { onEmbeddedCreated: (event) => created.push(event) },
  );
  try {
    const migrated = await migrateToLatest(database.db);
    const { rows } = await sql<{ name: string }>`select name from kysely_migration order by name`.execute(database.db);
    // Tables of the first and the last migration, and a write.
    await sql`insert into users (id, name) values ('u1', 'One')`.execute(database.db);
    const posts = await sql<{ n: number }>`select count(*)::int as n from posts`.execute(database.db);
    await sql`select count(*) from webhook_outbox where historied_at is null`.execute(database.db);
    return { created, migrated, applied: rows.map((row) => row.name), posts: posts.rows[0]?.n, dataDir };
  } finally {
    await database.close();
  }
}

describe('the embedded data directory template', () => {
  it('is copied into a fresh data directory: valid, migrated, nothing left for the migration run', async () => {
    const before = readFileSync(join(template, EMBEDDED_TEMPLATE_META), 'utf8');
    const started = await startFresh('from-template', template);
    expect(started.created).toEqual([{ from: 'template', ms: expect.any(Number) }]);
    expect(started.migrated).toEqual([]);
    expect(started.applied).toEqual(migrationNames);
    expect(started.posts).toBe(0);
    // The template itself is untouched by the start that used it.
    const meta = JSON.parse(before) as EmbeddedTemplateMeta;
    expect(measureTree(join(template, EMBEDDED_TEMPLATE_PGDATA))).toEqual({ files: meta.files, bytes: meta.bytes });
    expect(readFileSync(join(template, EMBEDDED_TEMPLATE_META), 'utf8')).toBe(before);
  });

  it('is not used when built for other migrations: initdb, then every migration runs', async () => {
    const stale = templateVariant('stale', (dir) => {
      const meta = JSON.parse(readFileSync(join(dir, EMBEDDED_TEMPLATE_META), 'utf8')) as EmbeddedTemplateMeta;
      writeFileSync(
        join(dir, EMBEDDED_TEMPLATE_META),
        JSON.stringify({ ...meta, migrations: meta.migrations.slice(1) }),
      );
    });
    const started = await startFresh('stale', stale);
    expect(started.created).toEqual([
      { from: 'initdb', reason: expect.stringMatching(/stale/), ms: expect.any(Number) },
    ]);
    expect(started.migrated.map((result) => result.migrationName)).toEqual(migrationNames);
    expect(started.applied).toEqual(migrationNames);
  });

  it('is not copied when a file of it is missing', async () => {
    const damaged = templateVariant('missing-file', (dir) => rmSync(join(dir, EMBEDDED_TEMPLATE_PGDATA, 'PG_VERSION')));
    const dataDir = join(root, 'data', 'missing-file', 'pgdata');
    expect(copyEmbeddedTemplate(damaged, dataDir, migrationNames)).toEqual({
      copied: false,
      reason: expect.stringMatching(/damaged/),
    });
    expect(existsSync(dataDir)).toBe(false);
  });

  it('whose copy does not open (a garbled pg_control) is removed and replaced by initdb', async () => {
    const garbled = templateVariant('garbled', (dir) => {
      const control = join(dir, EMBEDDED_TEMPLATE_PGDATA, 'global', 'pg_control');
      writeFileSync(control, Buffer.alloc(statSync(control).size, 0x5a));
    });
    const started = await startFresh('garbled', garbled);
    expect(started.created).toEqual([
      { from: 'initdb', reason: expect.stringMatching(/does not open/), ms: expect.any(Number) },
    ]);
    expect(started.migrated.map((result) => result.migrationName)).toEqual(migrationNames);
    expect(started.applied).toEqual(migrationNames);
  });

  it('never overwrites a data directory that is not empty', async () => {
    const dataDir = join(root, 'data', 'not-empty', 'pgdata');
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(join(dataDir, 'keep-me'), 'x');
    expect(copyEmbeddedTemplate(template, dataDir, migrationNames)).toEqual({
      copied: false,
      reason: expect.stringMatching(/not empty/),
    });
    expect(readFileSync(join(dataDir, 'keep-me'), 'utf8')).toBe('x');
    expect(existsSync(join(dataDir, 'PG_VERSION'))).toBe(false);
  });
});

describe('embeddedTemplateKey', () => {
  const migrationsDir = fileURLToPath(new URL('./migrations/', import.meta.url));

  it('changes when a migration is added or edited, so the build step rebuilds the template', () => {
    const copy = join(root, 'migrations');
    cpSync(migrationsDir, copy, { recursive: true });
    const key = embeddedTemplateKey(copy);
    expect(embeddedTemplateKey(copy)).toBe(key);
    writeFileSync(join(copy, '2099-01-01T00-00_added.ts'), 'export async function up() {}\n');
    const added = embeddedTemplateKey(copy);
    expect(added).not.toBe(key);
    writeFileSync(join(copy, '2099-01-01T00-00_added.ts'), 'export async function up() { /* edited */ }\n');
    expect(embeddedTemplateKey(copy)).not.toBe(added);
  });

  it('marks a missing template, or one built with another key, as stale', () => {
    expect(isEmbeddedTemplateStale(join(root, 'nowhere'), 'test-key')).toBe(true);
    expect(isEmbeddedTemplateStale(template, 'test-key')).toBe(false);
    expect(isEmbeddedTemplateStale(template, 'another-key')).toBe(true);
  });
});
