import { signWebhook, toStandardWebhookSecret, verifyWebhook } from '@herald/webhooks';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { HeraldDatabase } from './create-database.js';
import type { Database } from './database.js';
import { migrateTestDatabaseTo, testBackends } from './testing.js';

// The Standard Webhooks migration annotates every stored secret with the form `standardwebhooks` and
// `svix` accept, computed in SQL exactly as @herald/webhooks computes it, and leaves the secret
// itself (the X-Webhook-Signature key receivers hold) untouched. (A later migration drops the column
// again, secrets being sealed since: this pins what the migration did, on the schema as it left it.)

const BEFORE = '2026-11-23T11-00_webhook-endpoint-health';
const MIGRATION = '2026-11-23T11-20_webhooks-ops-standard-secrets';
/** Secrets as they may sit in a database migrated before Standard Webhooks. */
const STORED_SECRETS = [
  `whsec_${Buffer.alloc(32, 0xfb).toString('base64url')}`, // issued by generateWebhookSecret before: base64url
  `whsec_${Buffer.from('0123456789abcdef0123456789abcdef').toString('base64url')}`,
  `whsec_${Buffer.alloc(32, 0xff).toString('base64')}`, // already standard base64 (padded)
  'whsec_abcdefg', // base64url of a length that is not a multiple of 4
  'whsec_abcde', // 4n+1 characters: no whole byte, so keyed as text
  'whsec_with spaces and ünïcode',
  'a-secret-set-by-hand',
];
/** An ed25519 signing key (asymmetric v1a): no Standard Webhooks HMAC form. */
const SIGNING_KEY = `whsk_${Buffer.alloc(32, 7).toString('base64')}`;

const backends = testBackends(() => inject('databaseUrl'));

describe.each(backends)('the standard-secrets migration on $name', ({ openMigrated }) => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;

  beforeAll(async () => {
    ({ database, db } = await openMigrated(BEFORE));
    for (const [index, secret] of STORED_SECRETS.entries()) {
      await sql`insert into webhook_endpoints (id, org_id, url, event_types)
        values (${`we_old${index}`}, 'org-old', 'https://example.com/hook', '{post.published}')`.execute(db);
      await sql`insert into webhook_endpoint_secrets (endpoint_id, secret) values (${`we_old${index}`}, ${secret})`.execute(
        db,
      );
    }
    await sql`insert into webhook_endpoints (id, org_id, url, event_types)
      values ('we_oldkey', 'org-old', 'https://example.com/hook', '{post.published}')`.execute(db);
    await sql`insert into webhook_endpoint_secrets (endpoint_id, secret) values ('we_oldkey', ${SIGNING_KEY})`.execute(
      db,
    );
    await migrateTestDatabaseTo(db, MIGRATION);
  });

  /** The rows' secret and standard_secret (columns of this schema, no longer of the app's Database type). */
  const secretsOf = async (where: ReturnType<typeof sql>) =>
    (
      await sql<{ secret: string; standard_secret: string | null }>`
        select secret, standard_secret from webhook_endpoint_secrets where ${where} order by endpoint_id, id`.execute(
        db,
      )
    ).rows;

  afterAll(() => database.close());

  it('gives every existing secret the Standard Webhooks form toStandardWebhookSecret computes, secret unchanged', async () => {
    const rows = await secretsOf(sql`endpoint_id like 'we_old_'`);
    expect(rows.map((row) => row.secret)).toEqual(STORED_SECRETS);
    expect(rows.map((row) => row.standard_secret)).toEqual(STORED_SECRETS.map(toStandardWebhookSecret));
    expect(rows[0]?.standard_secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(rows[2]?.standard_secret).toBe(STORED_SECRETS[2]);
    const [key] = await secretsOf(sql`endpoint_id = 'we_oldkey'`);
    expect(key).toEqual({ secret: SIGNING_KEY, standard_secret: null });
    expect(() => toStandardWebhookSecret(SIGNING_KEY)).toThrow(TypeError);
  });

  it('lets a receiver verify an old secret’s delivery by the Standard scheme with the stored form', async () => {
    const [row] = await secretsOf(sql`endpoint_id = 'we_old0'`);
    if (!row) throw new Error('no row for we_old0');
    const event = { id: 'evt_migrated', type: 'post.published', created: new Date().toISOString(), data: {} };
    const rawBody = JSON.stringify(event);
    const headers = signWebhook({ eventId: event.id, rawBody, secrets: [row.secret] });
    expect(verifyWebhook({ rawBody, headers, secrets: [row.standard_secret!], scheme: 'standard' })).toEqual(event);
    expect(verifyWebhook({ rawBody, headers, secrets: [row.secret], scheme: 'stripe' })).toEqual(event);
  });

  it('annotates secrets written after the migration too', async () => {
    await sql`insert into webhook_endpoints (id, org_id, url, event_types)
      values ('we_new', 'org-new', 'https://example.com/new', '{post.published}')`.execute(db);
    for (const secret of [STORED_SECRETS[0]!, 'whsec_rotated-by-hand']) {
      await sql`insert into webhook_endpoint_secrets (endpoint_id, secret) values ('we_new', ${secret})`.execute(db);
    }
    const rows = await secretsOf(sql`endpoint_id = 'we_new'`);
    expect(rows.map((row) => row.standard_secret)).toEqual(
      [STORED_SECRETS[0]!, 'whsec_rotated-by-hand'].map(toStandardWebhookSecret),
    );
  });
});
