import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createDatabase, envelopeKeyId, listActiveWebhookSecrets } from '@herald/db';
import { migrateTestDatabaseTo } from '@herald/db/testing';
import { createTestSchema, dumpSchema, type TestSchema } from '@herald/testing';
import { sql } from 'kysely';
import { beforeAll, describe, expect, inject, it } from 'vitest';

// `pnpm migrate` is also the data migration of secrets at rest: run on a database of a version that
// stored webhook signing secrets in plain text, it leaves every one sealed under the keyring's first
// key, opening to the same secret, and refuses (one line, exit 1) a keyring that cannot open them.

const API_DIR = fileURLToPath(new URL('..', import.meta.url));
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
/** The last schema before secrets were sealed. */
const BEFORE_SEALING = '2026-11-27T07-30_webhook-hot-path-without-foreign-keys';
/** A keyring of two keys, newest first: the first seals. */
const KEYRING = `k2:${Buffer.alloc(32, 0x32).toString('base64')},k1:${Buffer.alloc(32, 0x31).toString('base64')}`;
/** Another key under the id `k2`. */
const OTHER_K2 = `k2:${Buffer.alloc(32, 0x33).toString('base64')}`;
const LEGACY = [
  ['we_migrate_hmac', `whsec_${Buffer.alloc(32, 0xc1).toString('base64')}`],
  ['we_migrate_key', `whsk_${Buffer.alloc(32, 0xc2).toString('base64')}`],
] as const;

/** Runs `pnpm migrate`'s script against the schema, as an operator would before a rollout. */
async function migrate(
  schema: TestSchema,
  keyring: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--import', TSX_LOADER, 'src/migrate-cli.ts'], {
    cwd: API_DIR,
    env: {
      PATH: process.env.PATH ?? '',
      DATABASE_URL: schema.url,
      JWT_SECRET: 'x'.repeat(32),
      HERALD_ENCRYPTION_KEYS: keyring,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  // Bounded: a CLI that hangs fails the test instead of outliving it.
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  let code: unknown;
  try {
    [code] = await once(child, 'exit');
  } finally {
    clearTimeout(timer);
    child.kill('SIGKILL');
  }
  return { code: code as number | null, stdout, stderr };
}

describe('pnpm migrate on a database that holds plain-text signing secrets', () => {
  let schema: TestSchema;

  beforeAll(async () => {
    schema = await createTestSchema(inject('databaseUrl'));
    const database = await createDatabase({ kind: 'postgres', url: schema.url });
    try {
      await migrateTestDatabaseTo(database.db, BEFORE_SEALING);
      for (const [endpointId, secret] of LEGACY) {
        await sql`insert into webhook_endpoints (id, org_id, url, event_types)
          values (${endpointId}, 'org-migrate', 'https://example.com/hook', '{post.published}')`.execute(database.db);
        await sql`insert into webhook_endpoint_secrets (endpoint_id, secret) values (${endpointId}, ${secret})`.execute(
          database.db,
        );
      }
    } finally {
      await database.close();
    }
  });

  it('seals them under the first key, and they open to the same secrets; a second run seals nothing', async () => {
    const first = await migrate(schema, KEYRING);
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    expect(first.stdout).toContain('Success: 2026-11-28T13-30_webhook-secrets-sealed\n');
    expect(first.stdout).toContain(
      `sealed ${LEGACY.length} webhook signing secrets stored in plain text under key "k2"`,
    );

    const database = await createDatabase({ kind: 'postgres', url: schema.url });
    try {
      const { rows } = await sql<{ secret: string | null; sealed_secret: string | null }>`
        select secret, sealed_secret from webhook_endpoint_secrets`.execute(database.db);
      expect(rows).toHaveLength(LEGACY.length);
      for (const row of rows) {
        expect(row.secret).toBeNull();
        expect(envelopeKeyId(row.sealed_secret ?? '')).toBe('k2');
      }
      const keyring = [{ id: 'k2', key: Buffer.alloc(32, 0x32) }] as const;
      for (const [endpointId, secret] of LEGACY) {
        expect(await listActiveWebhookSecrets(database.db, endpointId, keyring)).toEqual([secret]);
      }
    } finally {
      await database.close();
    }
    const dump = await dumpSchema(inject('databaseUrl'), schema.schema);
    for (const [, secret] of LEGACY) expect(dump).not.toContain(secret.slice(secret.indexOf('_') + 1));

    const again = await migrate(schema, KEYRING);
    expect(again.code).toBe(0);
    expect(again.stdout).toBe('database is up to date\nwebhook signing secrets: none in plain text\n');
  });

  it('refuses a keyring that holds another key under the id in use: one line naming the variable, exit 1', async () => {
    // Sealed under k2 first (nothing to do if the test above ran), then another key under that id.
    expect((await migrate(schema, KEYRING)).code).toBe(0);
    const refused = await migrate(schema, OTHER_K2);
    expect(refused.code).toBe(1);
    const lines = refused.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^herald: the signing secret of endpoint we_migrate_\w+ does not open with key "k2" of HERALD_ENCRYPTION_KEYS/,
    );
  });

  it('refuses a malformed keyring before touching the database: one line naming the variable, exit 1', async () => {
    const before = await sealedKeyIds(schema);
    const refused = await migrate(schema, 'k1:not-a-32-byte-key');
    expect(refused.code).toBe(1);
    const lines = refused.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^herald: invalid configuration: HERALD_ENCRYPTION_KEYS/);
    expect(await sealedKeyIds(schema)).toEqual(before);
  });
});

/** Each signing secret row's key id (null: still plain text), by row. */
async function sealedKeyIds(schema: TestSchema): Promise<Array<string | undefined>> {
  const database = await createDatabase({ kind: 'postgres', url: schema.url });
  try {
    const { rows } = await sql<{ sealed_secret: string | null }>`
      select sealed_secret from webhook_endpoint_secrets order by id`.execute(database.db);
    return rows.map((row) => (row.sealed_secret === null ? undefined : envelopeKeyId(row.sealed_secret)));
  } finally {
    await database.close();
  }
}
