import { QUOTAS, type TenantLimits } from '../tenancy/quotas.js';
import { builder } from './builder.js';

export const ThrottledRef = builder.objectRef<Record<keyof TenantLimits, number>>('OrganizationThrottled').implement({
  description: "Refusals per quota: the organisation's operations, publishes, its members' sockets, subscriptions.",
  fields: (t) =>
    Object.fromEntries(QUOTAS.map((quota) => [quota, t.int({ resolve: (counts) => counts[quota] })])) as Record<
      keyof TenantLimits,
      ReturnType<typeof t.int>
    >,
});
