import { MAX_QUOTA_VALUE, QUOTAS, type TenantLimits } from '../tenancy/quotas.js';
import { builder } from './builder.js';
import { QUOTA_DESCRIPTIONS } from './quota-descriptions.js';

export const LimitsInput = builder.inputType('OrganizationLimitsInput', {
  description: `Values to set, each 0 (no limit) to ${MAX_QUOTA_VALUE}; null returns a quota to the default, an absent field keeps it.`,
  fields: (t) =>
    Object.fromEntries(
      QUOTAS.map((quota) => [quota, t.int({ required: false, description: QUOTA_DESCRIPTIONS[quota] })]),
    ) as Record<keyof TenantLimits, ReturnType<typeof t.int>>,
});
