import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import {
  countNotUnderFirstKey,
  createDatabase,
  insertWebhookEndpoint,
  listActiveWebhookSecrets,
  lockDataDirectory,
  migrateToLatest,
} from '@herald/db';
import { TEST_ENCRYPTION_KEYS, TEST_KEYRING } from '@herald/testing';
import { createDispatcherHarness, type DispatcherHarness } from '@herald/webhook-engine/testing';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';

// `pnpm secrets rotate-key` as operators run it (tsx src/secrets-cli.ts): with the new key first in
// HERALD_ENCRYPTION_KEYS and the old one after it.

const CLI = fileURLToPath(new URL('./secrets-cli.ts', import.meta.url));
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const NEW_KEY = { id: 'k2', key: Buffer.alloc(32, 0x2b) };
const ENDPOINTS = 5;

let harness: DispatcherHarness;
const endpoints: Array<{ id: string; secret: string }> = [];

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  for (let i = 0; i < ENDPOINTS; i++)
    endpoints.push(await harness.createEndpoint('org-cli', `https://example.com/${i}`));
});

afterAll(() => harness?.close());

function secrets(args: string[], env: Record<string, string>) {
  return promisify(execFile)(process.execPath, ['--import', TSX_LOADER, CLI, ...args], {
    env: { PATH: process.env.PATH, ...env },
  }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code: number; stdout: string; stderr: string }) => error,
  );
}

describe('pnpm secrets rotate-key', () => {
  it('refuses bad usage (2) and a missing keyring (1, one line naming it)', async () => {
    expect((await secrets(['rotate'], {})).code).toBe(2);
    expect((await secrets(['rotate-key', '--batch-size', '0'], {})).code).toBe(2);
    const missing = await secrets(['rotate-key'], { DATABASE_URL: harness.schema.url });
    expect(missing.code).toBe(1);
    expect(missing.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/^secrets: invalid configuration: HERALD_ENCRYPTION_KEYS: required/),
    ]);
  });

  it('re-encrypts every secret under the first key in batches, printing progress, and exits 0', async () => {
    const keys = `k2:${NEW_KEY.key.toString('base64')},${TEST_ENCRYPTION_KEYS}`;
    const { code, stdout, stderr } = await secrets(['rotate-key', '--batch-size', '2'], {
      DATABASE_URL: harness.schema.url,
      HERALD_ENCRYPTION_KEYS: keys,
    });
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(stdout.split('\n')).toEqual(
      expect.arrayContaining([
        `${ENDPOINTS} signing secret(s) not under key "k2"`,
        're-encrypted 2',
        're-encrypted 4',
        `${ENDPOINTS} re-encrypted under key "k2", 0 left`,
      ]),
    );
    expect(await countNotUnderFirstKey(harness.db, [NEW_KEY])).toBe(0);
    for (const endpoint of endpoints) {
      expect(await listActiveWebhookSecrets(harness.db, endpoint.id, [NEW_KEY])).toEqual([endpoint.secret]);
    }
    // Nothing is left under the old key: a second run has nothing to do.
    const again = await secrets(['rotate-key'], { DATABASE_URL: harness.schema.url, HERALD_ENCRYPTION_KEYS: keys });
    expect(again.stdout).toContain('0 re-encrypted under key "k2", 0 left');
    await expect(listActiveWebhookSecrets(harness.db, endpoints[0]!.id, TEST_KEYRING)).rejects.toThrow(
      /sealed under key "k2"/,
    );
  });

  it('works on an embedded data directory too (no DATABASE_URL)', { timeout: 180_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'herald-secrets-cli-'));
    try {
      const open = () => createDatabase({ kind: 'embedded', dataDir: join(dataDir, 'pgdata') });
      let database = await open();
      await migrateToLatest(database.db);
      const endpoint = await insertWebhookEndpoint(database.db, {
        orgId: 'org-embedded',
        url: 'https://example.com/embedded',
        eventTypes: ['post.published'],
        secret: 'whsec_ZW1iZWRkZWQtc2VjcmV0LXVuZGVyLXRoZS10ZXN0LWtleQ==',
        keyring: TEST_KEYRING,
      });
      await database.close();
      const { code, stdout } = await secrets(['rotate-key'], {
        HERALD_DATA_DIR: dataDir,
        HERALD_ENCRYPTION_KEYS: `k2:${NEW_KEY.key.toString('base64')},${TEST_ENCRYPTION_KEYS}`,
      });
      expect(code).toBe(0);
      expect(stdout).toContain('1 re-encrypted under key "k2", 0 left');
      database = await open();
      try {
        expect(await listActiveWebhookSecrets(database.db, endpoint.id, [NEW_KEY])).toEqual([
          'whsec_ZW1iZWRkZWQtc2VjcmV0LXVuZGVyLXRoZS10ZXN0LWtleQ==',
        ]);
      } finally {
        await database.close();
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('is refused in one line while a server holds the embedded data directory', { timeout: 60_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'herald-secrets-cli-'));
    // This process stands in for the server: it holds the directory's lock as an opened database does.
    const held = lockDataDirectory(join(dataDir, 'pgdata'));
    try {
      const { code, stderr } = await secrets(['rotate-key'], {
        HERALD_DATA_DIR: dataDir,
        HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
      });
      expect(code).toBe(1);
      expect(stderr.trim().split('\n')).toEqual([
        expect.stringMatching(new RegExp(`^secrets: data directory .*pgdata is in use by process ${process.pid} `)),
      ]);
    } finally {
      held.release();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
