import type { Context } from '../context.js';
import { BadUserInputError } from '../errors.js';
import {
  effectiveLimits,
  invalidQuotaValue,
  MAX_QUOTA_VALUE,
  QUOTAS,
  type TenantLimitOverrides,
  type TenantLimits,
} from '../tenancy/quotas.js';
import type { OrganizationUsage } from '../tenancy/tenant-quotas.js';
import { builder } from './builder.js';

/** An organisation's limits as resolved: in force, and the overrides behind them. */
interface LimitsShape {
  orgId: string;
  limits: TenantLimits;
  overrides: TenantLimitOverrides;
}

const QUOTA_DESCRIPTIONS: Record<keyof TenantLimits, string> = {
  operationsPerSecond: 'GraphQL operations per second over HTTP and WebSocket (a burst of one second passes).',
  publishesPerSecond: '`publishPost` per second.',
  socketsPerUser: "Open WebSockets per user (the largest among a user's organisations applies).",
  subscriptions: 'Active subscriptions in the organisation.',
  webhookAttemptsInFlight:
    'Webhook delivery attempts in flight at once, across all dispatchers (deliveries over it wait, never fail).',
};

const LimitOverridesRef = builder.objectRef<TenantLimitOverrides>('OrganizationLimitOverrides').implement({
  description: "An organisation's own values; null keeps the server's default.",
  fields: (t) =>
    Object.fromEntries(
      QUOTAS.map((quota) => [
        quota,
        t.int({ nullable: true, description: QUOTA_DESCRIPTIONS[quota], resolve: (overrides) => overrides[quota] }),
      ]),
    ) as Record<keyof TenantLimits, ReturnType<typeof t.int>>,
});

const OrganizationLimitsRef = builder.objectRef<LimitsShape>('OrganizationLimits').implement({
  description: 'The quotas in force for an organisation (0: no limit) and the overrides that set them.',
  fields: (t) => ({
    orgId: t.exposeID('orgId'),
    ...(Object.fromEntries(
      QUOTAS.map((quota) => [
        quota,
        t.int({ description: QUOTA_DESCRIPTIONS[quota], resolve: (shape) => shape.limits[quota] }),
      ]),
    ) as Record<keyof TenantLimits, ReturnType<typeof t.int>>),
    overrides: t.field({ type: LimitOverridesRef, resolve: (shape) => shape.overrides }),
  }),
});

const ThrottledRef = builder.objectRef<Record<keyof TenantLimits, number>>('OrganizationThrottled').implement({
  description: "Refusals per quota: the organisation's operations, publishes, its members' sockets, subscriptions.",
  fields: (t) =>
    Object.fromEntries(QUOTAS.map((quota) => [quota, t.int({ resolve: (counts) => counts[quota] })])) as Record<
      keyof TenantLimits,
      ReturnType<typeof t.int>
    >,
});

const OrganizationUsageRef = builder.objectRef<OrganizationUsage>('OrganizationUsage').implement({
  description: 'What an organisation uses now, against its limits, and what was refused.',
  fields: (t) => ({
    orgId: t.exposeID('orgId'),
    operationsPerSecond: t.exposeInt('operationsPerSecond', {
      description: 'Operations counted in the current second.',
    }),
    publishesPerSecond: t.exposeInt('publishesPerSecond', { description: 'Publishes counted in the current second.' }),
    sockets: t.exposeInt('sockets', { description: 'Open WebSockets of tokens that list the organisation.' }),
    subscriptions: t.exposeInt('subscriptions', { description: 'Active subscriptions.' }),
    webhookAttemptsInFlight: t.exposeInt('webhookAttemptsInFlight', {
      description: 'Webhook delivery attempts in flight now, across all dispatchers.',
    }),
    throttled: t.field({ type: ThrottledRef, resolve: (usage) => usage.throttled }),
    limits: t.field({
      type: OrganizationLimitsRef,
      description: 'The limits the figures above are held to.',
      resolve: (usage, _args, context) => limitsOf(context, usage.orgId),
    }),
  }),
});

const LimitsInput = builder.inputType('OrganizationLimitsInput', {
  description: `Values to set, each 0 (no limit) to ${MAX_QUOTA_VALUE}; null returns a quota to the default, an absent field keeps it.`,
  fields: (t) =>
    Object.fromEntries(
      QUOTAS.map((quota) => [quota, t.int({ required: false, description: QUOTA_DESCRIPTIONS[quota] })]),
    ) as Record<keyof TenantLimits, ReturnType<typeof t.int>>,
});

async function limitsOf(context: Context, orgId: string): Promise<LimitsShape> {
  const overrides = await context.quotas.limits.overridesOf(orgId);
  return { orgId, overrides, limits: effectiveLimits(context.quotas.defaults, overrides) };
}

builder.queryFields((t) => ({
  organizationLimits: t.field({
    type: OrganizationLimitsRef,
    description: "An organisation's quotas and overrides. Platform administrators only.",
    authScopes: { viewer: true, platformAdmin: true },
    args: { orgId: t.arg.id({ required: true }) },
    resolve: (_root, { orgId }, context) => limitsOf(context, String(orgId)),
  }),
  organizationUsage: t.field({
    type: OrganizationUsageRef,
    description:
      "An organisation's current use (rates in the current second, sockets, subscriptions) and refusals per quota. Its members and platform administrators.",
    authScopes: (_root, args) => ({ viewer: true, $any: { orgMember: String(args.orgId), platformAdmin: true } }),
    args: { orgId: t.arg.id({ required: true }) },
    resolve: (_root, { orgId }, context) => context.quotas.usage(String(orgId)),
  }),
}));

builder.mutationFields((t) => ({
  setOrganizationLimits: t.field({
    type: OrganizationLimitsRef,
    description:
      "Overrides an organisation's quotas (in force on every pod within seconds). Platform administrators only.",
    authScopes: { viewer: true, platformAdmin: true },
    args: {
      orgId: t.arg.id({ required: true }),
      limits: t.arg({ type: LimitsInput, required: true }),
    },
    resolve: async (_root, { orgId, limits }, context) => {
      const org = String(orgId);
      for (const quota of QUOTAS) {
        const invalid = invalidQuotaValue(limits[quota]);
        if (invalid) throw new BadUserInputError(`${quota} ${invalid}`, quota);
      }
      const current = await context.quotas.limits.overridesOf(org);
      const next = { ...current };
      for (const quota of QUOTAS) if (limits[quota] !== undefined) next[quota] = limits[quota] ?? null;
      const saved = await context.quotas.limits.save(org, next);
      context.log.info({ orgId: org, overrides: saved, by: context.viewer?.id }, 'organisation limits set');
      return { orgId: org, overrides: saved, limits: effectiveLimits(context.quotas.defaults, saved) };
    },
  }),
}));
