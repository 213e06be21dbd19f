import { type Database, findOrganizationLimits, saveOrganizationLimits } from '@herald/db';
import type { Kysely } from 'kysely';
import { effectiveLimits, type TenantLimitOverrides, type TenantLimits } from './quotas.js';

/** An override changed on another pod is in force here within this long. */
export const LIMITS_CACHE_TTL_MS = 5_000;
/** Organisations whose limits are remembered; past it the oldest entry goes. */
export const LIMITS_CACHE_MAX_ENTRIES = 10_000;

export interface OrganizationLimitsCache {
  /** The limits in force for `orgId`: its overrides over the defaults (the defaults if the database fails). */
  limitsOf(orgId: string): Promise<TenantLimits>;
  /** The stored overrides of `orgId` (all null without a row), read from the database now. */
  overridesOf(orgId: string): Promise<TenantLimitOverrides>;
  /** Stores `orgId`'s overrides; this pod uses them at once, the others within LIMITS_CACHE_TTL_MS. */
  save(orgId: string, overrides: TenantLimitOverrides): Promise<TenantLimitOverrides>;
}

interface Entry {
  limits: Promise<TenantLimits>;
  expiresAt: number;
}

const NO_OVERRIDES: TenantLimitOverrides = {
  operationsPerSecond: null,
  publishesPerSecond: null,
  socketsPerUser: null,
  subscriptions: null,
  webhookAttemptsInFlight: null,
};

/**
 * Per-organisation limits, read from `organization_limits` and kept for LIMITS_CACHE_TTL_MS (bounded
 * staleness) in at most LIMITS_CACHE_MAX_ENTRIES entries (bounded size). Concurrent misses for one
 * organisation share one query. A failed read answers the defaults (and is not kept): a database
 * outage never turns a quota check into an error.
 */
export function createOrganizationLimitsCache(deps: {
  db: Kysely<Database>;
  defaults: TenantLimits;
  onError: (error: unknown) => void;
  now?: () => number;
}): OrganizationLimitsCache {
  const now = deps.now ?? Date.now;
  const entries = new Map<string, Entry>();

  function remember(orgId: string, limits: Promise<TenantLimits>) {
    entries.delete(orgId);
    if (entries.size >= LIMITS_CACHE_MAX_ENTRIES) {
      const oldest = entries.keys().next().value;
      if (oldest !== undefined) entries.delete(oldest);
    }
    entries.set(orgId, { limits, expiresAt: now() + LIMITS_CACHE_TTL_MS });
  }

  async function read(orgId: string): Promise<TenantLimitOverrides> {
    const found = await findOrganizationLimits(deps.db, [orgId]);
    const stored = found.get(orgId);
    return stored ? { ...stored, webhookAttemptsInFlight: stored.webhookAttemptsInFlight ?? null } : NO_OVERRIDES;
  }

  return {
    limitsOf(orgId) {
      const entry = entries.get(orgId);
      if (entry && entry.expiresAt > now()) return entry.limits;
      const limits = read(orgId).then(
        (overrides) => effectiveLimits(deps.defaults, overrides),
        (error: unknown) => {
          deps.onError(error);
          entries.delete(orgId);
          return deps.defaults;
        },
      );
      remember(orgId, limits);
      return limits;
    },
    overridesOf: read,
    async save(orgId, overrides) {
      const stored = await saveOrganizationLimits(deps.db, orgId, overrides);
      const saved = { ...stored, webhookAttemptsInFlight: stored.webhookAttemptsInFlight ?? null };
      remember(orgId, Promise.resolve(effectiveLimits(deps.defaults, saved)));
      return saved;
    },
  };
}
