import { randomUUID } from 'node:crypto';
import { WEBHOOK_ENDPOINT_ID_PREFIX, type WebhookEventFilter } from '@herald/contracts';
import { type Kysely, sql } from 'kysely';
import type { Database } from './database.js';
import { openSecret, type SecretKeyring, sealSecret } from './secret-envelope.js';
import type { WebhookEndpoint, WebhookEndpointOrdering } from './webhook-tables.js';

export interface NewWebhookEndpointInput {
  orgId: string;
  url: string;
  eventTypes: readonly string[];
  /** The first signing secret. */
  secret: string;
  /** Seals the secret (its first key); the plaintext never reaches the database. */
  keyring: SecretKeyring;
  /** A filter on the event body, checked by the caller (`parseWebhookEventFilter`). @default none */
  filter?: WebhookEventFilter | null;
  /** Attempts per second at most, across every dispatcher. @default null (no limit) */
  rateLimitPerSecond?: number | null;
  /** FIFO: deliveries one after another in event order. @default UNORDERED */
  ordering?: WebhookEndpointOrdering;
}

/** Registers an endpoint with its first signing secret (sealed), atomically. */
export async function insertWebhookEndpoint(
  db: Kysely<Database>,
  input: NewWebhookEndpointInput,
): Promise<WebhookEndpoint> {
  return db.transaction().execute(async (trx) => {
    const endpoint = await trx
      .insertInto('webhook_endpoints')
      .values({
        id: `${WEBHOOK_ENDPOINT_ID_PREFIX}${randomUUID().replaceAll('-', '')}`,
        org_id: input.orgId,
        url: input.url,
        event_types: [...new Set(input.eventTypes)],
        filter: input.filter ? JSON.stringify(input.filter) : null,
        rate_limit_per_second: input.rateLimitPerSecond ?? null,
        ordering: input.ordering,
      })
      .returningAll()
      .executeTakeFirstOrThrow();
    await trx
      .insertInto('webhook_endpoint_secrets')
      .values({ endpoint_id: endpoint.id, sealed_secret: sealSecret(input.keyring, endpoint.id, input.secret) })
      .execute();
    return endpoint;
  });
}

/** An endpoint that is not deleted. */
export async function findWebhookEndpointById(db: Kysely<Database>, id: string): Promise<WebhookEndpoint | undefined> {
  return db
    .selectFrom('webhook_endpoints')
    .selectAll()
    .where('id', '=', id)
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
}

/** An organisation's endpoints, oldest first. */
export async function listWebhookEndpointsByOrg(db: Kysely<Database>, orgId: string): Promise<WebhookEndpoint[]> {
  return db
    .selectFrom('webhook_endpoints')
    .selectAll()
    .where('org_id', '=', orgId)
    .where('deleted_at', 'is', null)
    .orderBy('seq')
    .execute();
}

/**
 * Deletes an endpoint: marks it deleted at once (it disappears from every lookup and gets no new
 * deliveries; pending ones become SKIPPED when claimed), and the webhook engine's retention purges
 * its deliveries, attempts and the endpoint in bounded batches in the background, never in the request.
 * @param orgIds the organisations the caller may act on; an endpoint outside them is treated as absent
 * @returns whether an endpoint was deleted
 */
export async function deleteWebhookEndpoint(
  db: Kysely<Database>,
  id: string,
  orgIds: readonly string[],
): Promise<boolean> {
  if (orgIds.length === 0) return false;
  const result = await db
    .updateTable('webhook_endpoints')
    .set({ deleted_at: sql<Date>`now()` })
    .where('id', '=', id)
    .where('org_id', 'in', [...orgIds])
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * Sets (or, with null, clears) an endpoint's rate limit; dispatchers apply it from their next claim or
 * record of the endpoint.
 * @param orgIds the organisations the caller may act on; an endpoint outside them is treated as absent
 * @returns the endpoint, or undefined when there is none
 */
export async function setWebhookEndpointRateLimit(
  db: Kysely<Database>,
  input: { id: string; orgIds: readonly string[]; rateLimitPerSecond: number | null },
): Promise<WebhookEndpoint | undefined> {
  if (input.orgIds.length === 0) return undefined;
  return db
    .updateTable('webhook_endpoints')
    .set({ rate_limit_per_second: input.rateLimitPerSecond })
    .where('id', '=', input.id)
    .where('org_id', 'in', [...input.orgIds])
    .where('deleted_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}

export interface RotateSecretInput {
  endpointId: string;
  /** The new secret; it signs from now on. */
  secret: string;
  /** How long the secrets in use keep signing beside the new one (0: they stop at once). */
  graceMs: number;
  /** Seals the new secret (its first key). */
  keyring: SecretKeyring;
}

/**
 * Starts signing with a new secret. Every secret still in use expires after `graceMs` (or keeps its
 * earlier expiry), so during the grace period deliveries carry one `v1=` per secret and receivers can
 * switch over without dropping a delivery.
 */
export async function rotateWebhookSecret(db: Kysely<Database>, input: RotateSecretInput): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await trx
      .updateTable('webhook_endpoint_secrets')
      .set({
        expires_at: sql<Date>`least(coalesce(expires_at, 'infinity'::timestamptz), now() + ${input.graceMs}::double precision * interval '1 millisecond')`,
      })
      .where('endpoint_id', '=', input.endpointId)
      .where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', sql<Date>`now()`)]))
      .execute();
    await trx
      .insertInto('webhook_endpoint_secrets')
      .values({
        endpoint_id: input.endpointId,
        sealed_secret: sealSecret(input.keyring, input.endpointId, input.secret),
      })
      .execute();
  });
}

/**
 * The secrets an endpoint signs with right now, newest first, opened with `keyring`.
 * @throws SecretUnreadableError when one does not open with the keyring
 */
export async function listActiveWebhookSecrets(
  db: Kysely<Database>,
  endpointId: string,
  keyring: SecretKeyring,
): Promise<string[]> {
  const rows = await db
    .selectFrom('webhook_endpoint_secrets')
    .select('sealed_secret')
    .where('endpoint_id', '=', endpointId)
    .where('sealed_secret', 'is not', null)
    .where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', sql<Date>`now()`)]))
    .orderBy('id', 'desc')
    .execute();
  return rows.map((row) => openSecret(keyring, endpointId, row.sealed_secret as string));
}
