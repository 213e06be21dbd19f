import type { Context } from '../context.js';
import { BadUserInputError } from '../errors.js';
import {
  effectiveLimits,
  invalidQuotaValue,
  QUOTAS,
  type TenantLimitOverrides,
  type TenantLimits,
} from '../tenancy/quotas.js';
import { builder } from './builder.js';
import { LimitOverridesRef } from './organization-limit-overrides.js';
import { LimitsInput } from './organization-limits-input.js';
import { QUOTA_DESCRIPTIONS } from './quota-descriptions.js';

/** An organisation's limits as resolved: in force, and the overrides behind them. */
interface LimitsShape {
  orgId: string;
  limits: TenantLimits;
  overrides: TenantLimitOverrides;
}

export const OrganizationLimitsRef = builder.objectRef<LimitsShape>('OrganizationLimits').implement({
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

export async function limitsOf(context: Context, orgId: string): Promise<LimitsShape> {
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
