import type { Kysely } from 'kysely';
import type { Database } from './database.js';

/**
 * An organisation's quota overrides as stored: `null` keeps the environment's default, `0` means no
 * limit, any other value replaces the default.
 */
export interface OrganizationLimitOverrides {
  operationsPerSecond: number | null;
  publishesPerSecond: number | null;
  socketsPerUser: number | null;
  subscriptions: number | null;
  /** Webhook attempts in flight across all dispatchers; absent (an older caller) keeps what is stored. */
  webhookAttemptsInFlight?: number | null;
}

/** The overrides of `orgIds` that have a row; organisations without one are absent from the map. */
export async function findOrganizationLimits(
  db: Kysely<Database>,
  orgIds: readonly string[],
): Promise<Map<string, OrganizationLimitOverrides>> {
  const found = new Map<string, OrganizationLimitOverrides>();
  if (orgIds.length === 0) return found;
  const rows = await db
    .selectFrom('organization_limits')
    .select([
      'org_id',
      'operations_per_second',
      'publishes_per_second',
      'sockets_per_user',
      'subscriptions',
      'webhook_attempts_in_flight',
    ])
    .where('org_id', 'in', orgIds)
    .execute();
  for (const row of rows) {
    found.set(row.org_id, {
      operationsPerSecond: row.operations_per_second,
      publishesPerSecond: row.publishes_per_second,
      socketsPerUser: row.sockets_per_user,
      subscriptions: row.subscriptions,
      webhookAttemptsInFlight: row.webhook_attempts_in_flight,
    });
  }
  return found;
}

/**
 * Stores the overrides of one organisation, replacing its previous ones (a null keeps the default).
 * @returns the stored overrides
 */
export async function saveOrganizationLimits(
  db: Kysely<Database>,
  orgId: string,
  limits: OrganizationLimitOverrides,
): Promise<OrganizationLimitOverrides> {
  const values = {
    operations_per_second: limits.operationsPerSecond,
    publishes_per_second: limits.publishesPerSecond,
    sockets_per_user: limits.socketsPerUser,
    subscriptions: limits.subscriptions,
    ...(limits.webhookAttemptsInFlight !== undefined && { webhook_attempts_in_flight: limits.webhookAttemptsInFlight }),
  };
  await db
    .insertInto('organization_limits')
    .values({ org_id: orgId, ...values })
    .onConflict((oc) => oc.column('org_id').doUpdateSet({ ...values, updated_at: new Date() }))
    .execute();
  return { ...limits };
}

/**
 * The webhook in-flight overrides of `orgIds` (the dispatchers' view of `organization_limits`):
 * organisations without a row, or with a null value, are absent (the default applies).
 */
export async function findWebhookInFlightOverrides(
  db: Kysely<Database>,
  orgIds: readonly string[],
): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  if (orgIds.length === 0) return found;
  const rows = await db
    .selectFrom('organization_limits')
    .select(['org_id', 'webhook_attempts_in_flight'])
    .where('org_id', 'in', orgIds)
    .where('webhook_attempts_in_flight', 'is not', null)
    .execute();
  for (const row of rows) found.set(row.org_id, row.webhook_attempts_in_flight ?? 0);
  return found;
}
