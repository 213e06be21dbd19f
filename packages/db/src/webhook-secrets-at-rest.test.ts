import { dumpSchema } from '@herald/testing';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { HeraldDatabase } from './create-database.js';
import type { Database } from './database.js';
import { migrateToLatest } from './migrate.js';
import { envelopeKeyId, SecretUnreadableError } from './secret-envelope.js';
import { testBackends } from './testing.js';
import { insertWebhookEndpoint, listActiveWebhookSecrets, rotateWebhookSecret } from './webhook-endpoints.js';
import { countNotUnderFirstKey, prepareWebhookSecrets, resealWebhookSecrets } from './webhook-secrets-at-rest.js';

// Secrets at rest: rows written before the sealed column are sealed at the first start, new ones are
// sealed when written, a rotation moves every row to the new first key, and what the database holds
// (down to a pg_dump of it) has no secret in it.

const BEFORE = '2026-11-27T07-30_webhook-hot-path-without-foreign-keys';
const K1 = { id: 'k1', key: Buffer.alloc(32, 0x11) };
const K2 = { id: 'k2', key: Buffer.alloc(32, 0x22) };
/** Secrets as a database of the previous version holds them, in plain text: endpoint, secret. */
const LEGACY = [
  ['we_legacy_hmac', `whsec_${Buffer.alloc(32, 0xa1).toString('base64')}`],
  ['we_legacy_key', `whsk_${Buffer.alloc(32, 0xa2).toString('base64')}`],
  ['we_legacy_rotating', `whsec_${Buffer.alloc(32, 0xa3).toString('base64')}`],
  ['we_legacy_rotating', `whsec_${Buffer.alloc(32, 0xa4).toString('base64')}`],
] as const;
const NEW_SECRET = `whsec_${Buffer.alloc(32, 0xb1).toString('base64')}`;
const ROTATED_SECRET = `whsk_${Buffer.alloc(32, 0xb2).toString('base64')}`;

/** Every form a leaked secret could take in a dump: as given, and its key bytes in base64 and hex. */
function formsOf(secret: string): string[] {
  const body = secret.slice(secret.indexOf('_') + 1);
  return [secret, body, Buffer.from(body, 'base64').toString('hex')];
}

const backends = testBackends(() => inject('databaseUrl'));

describe.each(backends)('webhook secrets at rest on $name', ({ openMigrated }) => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;
  let schema: string | undefined;
  let newEndpointId: string;

  beforeAll(async () => {
    const opened = await openMigrated(BEFORE);
    ({ database, db } = opened);
    schema = opened.schema?.schema;
    for (const [endpointId, secret] of LEGACY) {
      await sql`insert into webhook_endpoints (id, org_id, url, event_types)
        values (${endpointId}, 'org-legacy', 'https://example.com/hook', '{post.published}') on conflict do nothing`.execute(
        db,
      );
      await sql`insert into webhook_endpoint_secrets (endpoint_id, secret) values (${endpointId}, ${secret})`.execute(
        db,
      );
    }
    await migrateToLatest(db);
  });

  afterAll(() => database.close());

  const dump = () => dumpSchema(inject('databaseUrl'), schema as string);

  it('seals the rows of the previous version at start, which then open to the same secrets', async () => {
    if (schema) {
      // The migration alone cannot encrypt (SQL has no key): the plaintext is still there, and the dump shows it.
      expect(await dump()).toContain(LEGACY[0][1]);
    }
    expect(await prepareWebhookSecrets(db, [K1])).toEqual({ sealed: LEGACY.length });
    const rows = await db.selectFrom('webhook_endpoint_secrets').select(['secret', 'sealed_secret']).execute();
    expect(rows.map((row) => row.secret)).toEqual(rows.map(() => null));
    expect(rows.map((row) => envelopeKeyId(row.sealed_secret ?? ''))).toEqual(rows.map(() => 'k1'));
    expect(await listActiveWebhookSecrets(db, 'we_legacy_key', [K1])).toEqual([LEGACY[1][1]]);
    expect(await listActiveWebhookSecrets(db, 'we_legacy_rotating', [K1])).toEqual([LEGACY[3][1], LEGACY[2][1]]);
    // A second start has nothing left to seal.
    expect(await prepareWebhookSecrets(db, [K1])).toEqual({ sealed: 0 });
  });

  it('seals what is written from now on: a new endpoint and a rotation', async () => {
    const endpoint = await insertWebhookEndpoint(db, {
      orgId: 'org-new',
      url: 'https://example.com/new',
      eventTypes: ['post.published'],
      secret: NEW_SECRET,
      keyring: [K1],
    });
    newEndpointId = endpoint.id;
    await rotateWebhookSecret(db, { endpointId: endpoint.id, secret: ROTATED_SECRET, graceMs: 60_000, keyring: [K1] });
    expect(await listActiveWebhookSecrets(db, endpoint.id, [K1])).toEqual([ROTATED_SECRET, NEW_SECRET]);
    const plaintext = await db
      .selectFrom('webhook_endpoint_secrets')
      .select('id')
      .where('secret', 'is not', null)
      .execute();
    expect(plaintext).toEqual([]);
  });

  it('holds no secret or signing key: not in a pg_dump of its schema, not in any row of the table', async () => {
    const { rows } = await sql<{ text: string }>`
      select string_agg(row::text, E'\n') as text from webhook_endpoint_secrets row`.execute(db);
    // PGlite has no pg_dump: its rows as text, every column included, are what a dump of it would hold.
    const text = schema ? await dump() : (rows[0]?.text ?? '');
    expect(text).toContain('v1:k1:'); // the text does hold the table's rows
    for (const secret of [...LEGACY.map(([, secret]) => secret), NEW_SECRET, ROTATED_SECRET]) {
      for (const form of formsOf(secret)) expect(text, form).not.toContain(form);
    }
  });

  it('does not open a ciphertext moved to another endpoint’s row', async () => {
    const [source] = await db
      .selectFrom('webhook_endpoint_secrets')
      .select('sealed_secret')
      .where('endpoint_id', '=', 'we_legacy_hmac')
      .execute();
    await db
      .updateTable('webhook_endpoint_secrets')
      .set({ sealed_secret: source?.sealed_secret ?? null })
      .where('endpoint_id', '=', 'we_legacy_key')
      .execute();
    const moved = await listActiveWebhookSecrets(db, 'we_legacy_key', [K1]).catch((error: unknown) => error);
    expect(moved).toBeInstanceOf(SecretUnreadableError);
    expect(moved).toMatchObject({ reason: 'authentication', endpointId: 'we_legacy_key' });
    await db.deleteFrom('webhook_endpoint_secrets').where('endpoint_id', '=', 'we_legacy_key').execute();
  });

  it('refuses a keyring that lacks the key in use, or holds another key under its id, naming the variable, and seals nothing under it', async () => {
    // A row still in plain text (written by a process of the previous version): a refused keyring leaves it so.
    const late = `whsec_${Buffer.alloc(32, 0xc5).toString('base64')}`;
    await sql`insert into webhook_endpoint_secrets (endpoint_id, secret) values ('we_legacy_hmac', ${late})`.execute(
      db,
    );
    const plaintextRows = async () =>
      (await db.selectFrom('webhook_endpoint_secrets').select('id').where('secret', 'is not', null).execute()).length;
    await expect(prepareWebhookSecrets(db, [K2])).rejects.toThrow(/"k1", which HERALD_ENCRYPTION_KEYS does not list/);
    await expect(prepareWebhookSecrets(db, [{ id: 'k1', key: K2.key }])).rejects.toThrow(
      /does not open with key "k1" of HERALD_ENCRYPTION_KEYS/,
    );
    expect(await plaintextRows()).toBe(1);
    expect(await prepareWebhookSecrets(db, [K1])).toEqual({ sealed: 1 });
    expect(await plaintextRows()).toBe(0);
    await db.deleteFrom('webhook_endpoint_secrets').where('endpoint_id', '=', 'we_legacy_hmac').execute();
  });

  it('re-encrypts every row under a new first key, in batches, after which the old key is not needed', async () => {
    const rows = Number(
      (
        await db
          .selectFrom('webhook_endpoint_secrets')
          .select((eb) => eb.fn.countAll<string>().as('n'))
          .executeTakeFirst()
      )?.n,
    );
    expect(await countNotUnderFirstKey(db, [K2, K1])).toBe(rows);
    const progress: number[] = [];
    const result = await resealWebhookSecrets(db, [K2, K1], { batchSize: 2, onBatch: (done) => progress.push(done) });
    expect(result).toEqual({ resealed: rows, remaining: 0 });
    expect(progress.length).toBeGreaterThanOrEqual(Math.ceil(rows / 2));
    expect(await countNotUnderFirstKey(db, [K2])).toBe(0);
    await expect(prepareWebhookSecrets(db, [K2])).resolves.toEqual({ sealed: 0 });
    expect(await listActiveWebhookSecrets(db, newEndpointId, [K2])).toEqual([ROTATED_SECRET, NEW_SECRET]);
    expect(await resealWebhookSecrets(db, [K2])).toEqual({ resealed: 0, remaining: 0 });
  });
});
