import { QUOTAS, type TenantLimitOverrides, type TenantLimits } from '../tenancy/quotas.js';
import { builder } from './builder.js';
import { QUOTA_DESCRIPTIONS } from './quota-descriptions.js';

export const LimitOverridesRef = builder.objectRef<TenantLimitOverrides>('OrganizationLimitOverrides').implement({
  description: "An organisation's own values; null keeps the server's default.",
  fields: (t) =>
    Object.fromEntries(
      QUOTAS.map((quota) => [
        quota,
        t.int({ nullable: true, description: QUOTA_DESCRIPTIONS[quota], resolve: (overrides) => overrides[quota] }),
      ]),
    ) as Record<keyof TenantLimits, ReturnType<typeof t.int>>,
});
