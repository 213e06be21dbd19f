import { createDatabase, insertWebhookEndpoint, migrateToLatest } from '@herald/db';
import { createTestSchema, TEST_ENCRYPTION_KEYS, TEST_KEYRING, type TestSchema } from '@herald/testing';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { runApiExpectingExit } from './support/api-process.js';
import { runDispatcherExpectingExit, startDispatcherProcess } from './support/dispatcher-process.js';

// The keyring at start, as operators meet it: the API and the dispatcher refuse to start without
// HERALD_ENCRYPTION_KEYS, with a malformed one, or with one that cannot decrypt the stored secrets,
// each time with one line naming the variable, before serving anything.

const JWT_SECRET = 'secrets-at-rest-test-secret-0123456789abcdef';
const OTHER_KEY = Buffer.alloc(32, 0x0f).toString('base64');

let schema: TestSchema;

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  const database = await createDatabase({ kind: 'postgres', url: schema.url });
  try {
    await migrateToLatest(database.db);
    await insertWebhookEndpoint(database.db, {
      orgId: 'org-keys',
      url: 'https://receiver.example/hook',
      eventTypes: ['post.published'],
      secret: 'whsec_c2VhbGVkLXVuZGVyLXRoZS10ZXN0LWtleXJpbmc=',
      keyring: TEST_KEYRING,
    });
  } finally {
    await database.close();
  }
});

/** Lines of the output that name the variable. */
const namingLines = (output: string) => output.split('\n').filter((line) => line.includes('HERALD_ENCRYPTION_KEYS'));

describe('the API', () => {
  it.each([
    ['missing', undefined, /^herald: invalid configuration: HERALD_ENCRYPTION_KEYS: required when DATABASE_URL is set/],
    [
      'malformed',
      `k1:${OTHER_KEY.slice(4)}`,
      /^herald: invalid configuration: HERALD_ENCRYPTION_KEYS: entry 1 \("k1"\)/,
    ],
  ])('refuses a %s keyring in one line', async (_, keys, line) => {
    const { code, stderr } = await runApiExpectingExit({
      DATABASE_URL: schema.url,
      JWT_SECRET,
      ...(keys ? { HERALD_ENCRYPTION_KEYS: keys } : {}),
    });
    expect(code).toBe(1);
    expect(namingLines(stderr)).toHaveLength(1);
    expect(namingLines(stderr)[0]).toMatch(line);
    expect(stderr).not.toContain(OTHER_KEY.slice(4, 20));
  });

  it('refuses a keyring holding another key under the id in use, in one line, before listening', async () => {
    const { code, stdout, stderr } = await runApiExpectingExit({
      DATABASE_URL: schema.url,
      JWT_SECRET,
      HERALD_ENCRYPTION_KEYS: `test:${OTHER_KEY}`,
    });
    expect(code).toBe(1);
    const lines = namingLines(stdout + stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/does not open with key \\"test\\" of HERALD_ENCRYPTION_KEYS/);
    expect(stdout).not.toContain('herald api listening');
  });
});

describe('the webhook dispatcher', () => {
  const env = () => ({ DATABASE_URL: schema.url, REDIS_URL: inject('redisUrl') });

  it('refuses to start without the keyring, in one line', async () => {
    const { code, output } = await runDispatcherExpectingExit(env());
    expect(code).toBe(1);
    expect(namingLines(output)).toEqual([
      expect.stringMatching(/^herald-webhook-dispatcher: invalid configuration: HERALD_ENCRYPTION_KEYS: required/),
    ]);
  });

  it('refuses a keyring without the key the secrets are sealed under, in one line', async () => {
    const { code, output } = await runDispatcherExpectingExit({ ...env(), HERALD_ENCRYPTION_KEYS: `k9:${OTHER_KEY}` });
    expect(code).toBe(1);
    const lines = namingLines(output);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/sealed under key \\"test\\", which HERALD_ENCRYPTION_KEYS does not list/);
    expect(output).not.toContain('herald webhook dispatcher ready');
  });

  it('starts with the keyring the secrets were sealed under (the control for the refusals above)', async () => {
    const dispatcher = await startDispatcherProcess({
      ...env(),
      HERALD_ENCRYPTION_KEYS: `k9:${OTHER_KEY},${TEST_ENCRYPTION_KEYS}`,
      HERALD_REDIS_PREFIX: `herald-test-keys:${schema.schema}:`,
    });
    expect(await dispatcher.stop()).toBe(0);
  });
});
