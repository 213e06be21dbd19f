import { type Kysely, sql } from 'kysely';
import { up as addStandardSecretColumn } from './2026-11-23T11-20_webhooks-ops-standard-secrets.js';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// Signing secrets encrypted at rest (docs/operations.md, "Webhook encryption keys"). Encrypting needs the
// `HERALD_ENCRYPTION_KEYS` keyring, which SQL does not have, so the work is split in two:
// - this migration prepares the table: `sealed_secret` holds the envelope
//   (`v1:<key id>:<nonce>:<ciphertext>:<tag>`, AES-256-GCM with the endpoint id as associated data),
//   `secret` (the plaintext) becomes nullable, and every row must keep one of the two;
// - `standard_secret` goes, with the function computing it: it was generated from the plaintext and
//   is as good as the secret itself. A receiver derives that form from the secret it holds
//   (`toStandardWebhookSecret` in @herald/webhooks);
// - at every start the API and the dispatcher seal the rows still holding plaintext, in bounded
//   batches, each row in one conditional update (`set sealed_secret = …, secret = null where secret =
//   <what was read>`), so starts racing each other seal every row once. Then they check that one row
//   per key id opens, and refuse to start on a wrong key (webhook-secrets-at-rest.ts). Signing reads
//   only `sealed_secret`; nothing reads plaintext.
// - a later migration may drop `secret` once every installation has started on this version.
//
// Upgrading: a process of the previous version writes plaintext (which the next start of this
// version seals; until then the new dispatchers sign without that row) and signs with `secret`, which
// sealed rows no longer have. Stop the previous dispatchers before starting these.
//
// `webhook_endpoint_secrets_plaintext_idx` keeps "is anything left to seal" one index probe however
// many endpoints there are; it is empty once the first start has sealed.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('webhook_endpoint_secrets').dropColumn('standard_secret').execute();
  await sql`drop function herald_standard_webhook_secret(text)`.execute(db);
  await db.schema.alterTable('webhook_endpoint_secrets').addColumn('sealed_secret', 'text').execute();
  await sql`alter table webhook_endpoint_secrets alter column secret drop not null`.execute(db);
  await sql`alter table webhook_endpoint_secrets add constraint webhook_endpoint_secrets_kept
    check (secret is not null or sealed_secret is not null)`.execute(db);
  await sql`create index webhook_endpoint_secrets_plaintext_idx on webhook_endpoint_secrets (id)
    where secret is not null`.execute(db);
}

/** Refused (the `not null` fails) once any row is sealed: going back needs the plaintext, which is gone. */
export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop index webhook_endpoint_secrets_plaintext_idx`.execute(db);
  await sql`alter table webhook_endpoint_secrets drop constraint webhook_endpoint_secrets_kept`.execute(db);
  await sql`alter table webhook_endpoint_secrets alter column secret set not null`.execute(db);
  await db.schema.alterTable('webhook_endpoint_secrets').dropColumn('sealed_secret').execute();
  await addStandardSecretColumn(db);
}
