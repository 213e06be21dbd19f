import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// Standard Webhooks: deliveries also carry `webhook-signature`, keyed with the secret's
// base64-decoded bytes, and receivers paste the secret into `standardwebhooks`/`svix` as
// `whsec_` + standard base64. Secrets issued before were `whsec_` + base64url, which those libraries
// refuse. Stored secrets are NOT rewritten: the `X-Webhook-Signature` (Stripe) scheme keys its HMAC
// with the whole string as the receiver was given it, so changing it would break every receiver.
// Instead every secret row is annotated with its Standard Webhooks form, in a generated column so that
// rows written later (by any code, old or new) get it too:
// - `whsec_` + base64 or base64url (not 4n+1 characters): `whsec_` + standard base64 of the same bytes
//   (a secret issued today is its own form);
// - an ed25519 signing key (`whsk_…`, asymmetric `v1a` signatures): null, it has no HMAC form;
// - anything else: `whsec_` + base64 of the secret's UTF-8 bytes.
// This is `toStandardWebhookSecret` of @herald/webhooks, in SQL; a test pins that they agree.
// convert_to is only STABLE (it depends on the database encoding, fixed for the life of a database),
// so it is wrapped in a function declared IMMUTABLE, as a generated column requires.

export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create function herald_standard_webhook_secret(secret text) returns text
    language sql immutable strict parallel safe
    return case when secret like 'whsk\_%' then null else 'whsec_' || replace(
      case
        when secret ~ '^whsec_([A-Za-z0-9+/]{4,}={0,2}|[A-Za-z0-9_-]{4,})$'
          and length(rtrim(substr(secret, 7), '=')) % 4 <> 1
        then encode(
          decode(
            rpad(
              translate(rtrim(substr(secret, 7), '='), '-_', '+/'),
              ((length(rtrim(substr(secret, 7), '=')) + 3) / 4) * 4,
              '='
            ),
            'base64'
          ),
          'base64'
        )
        else encode(convert_to(secret, 'UTF8'), 'base64')
      end,
      E'\n',
      ''
    ) end`.execute(db);
  await sql`
    alter table webhook_endpoint_secrets
    add column standard_secret text generated always as (herald_standard_webhook_secret(secret)) stored`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('webhook_endpoint_secrets').dropColumn('standard_secret').execute();
  await sql`drop function herald_standard_webhook_secret(text)`.execute(db);
}
