/**
 * The tenant quotas (docs/tenancy.md): their names, as `extensions.limit` of a refusal, the usage
 * query and the `quota` label of `herald_tenant_refusals_total` use them.
 */
export const QUOTAS = [
  'operationsPerSecond',
  'publishesPerSecond',
  'socketsPerUser',
  'subscriptions',
  'webhookAttemptsInFlight',
] as const;

export type Quota = (typeof QUOTAS)[number];

/** One value per quota; `0` means no limit. */
export type TenantLimits = Record<Quota, number>;

/** Overrides of one organisation: `null` keeps the environment's default. */
export type TenantLimitOverrides = Record<Quota, number | null>;

/**
 * The largest value a quota takes, from the environment or an override: ten million a second is far
 * past what a cluster serves (docs/scaling.md), and a bigger number is a typo, not a plan.
 */
export const MAX_QUOTA_VALUE = 10_000_000;

/** The limits that apply: each override, else the default. */
export function effectiveLimits(defaults: TenantLimits, overrides: TenantLimitOverrides | undefined): TenantLimits {
  if (!overrides) return defaults;
  return {
    operationsPerSecond: overrides.operationsPerSecond ?? defaults.operationsPerSecond,
    publishesPerSecond: overrides.publishesPerSecond ?? defaults.publishesPerSecond,
    socketsPerUser: overrides.socketsPerUser ?? defaults.socketsPerUser,
    subscriptions: overrides.subscriptions ?? defaults.subscriptions,
    webhookAttemptsInFlight: overrides.webhookAttemptsInFlight ?? defaults.webhookAttemptsInFlight,
  };
}

/**
 * Why an override value is refused (negative, fractional, too large), or undefined when it is good.
 * `null` (keep the default) is good.
 */
export function invalidQuotaValue(value: number | null | undefined): string | undefined {
  if (value == null) return undefined;
  if (!Number.isInteger(value)) return 'must be a whole number';
  if (value < 0) return 'must be 0 (no limit) or more';
  if (value > MAX_QUOTA_VALUE) return `must be at most ${MAX_QUOTA_VALUE}`;
  return undefined;
}
