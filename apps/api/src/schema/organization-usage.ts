import type { OrganizationUsage } from '../tenancy/tenant-quotas.js';
import { builder } from './builder.js';
import { limitsOf, OrganizationLimitsRef } from './organization-limits.js';
import { ThrottledRef } from './organization-throttled.js';

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

builder.queryFields((t) => ({
  organizationUsage: t.field({
    type: OrganizationUsageRef,
    description:
      "An organisation's current use (rates in the current second, sockets, subscriptions) and refusals per quota. Its members and platform administrators.",
    authScopes: (_root, args) => ({ viewer: true, $any: { orgMember: String(args.orgId), platformAdmin: true } }),
    args: { orgId: t.arg.id({ required: true }) },
    resolve: (_root, { orgId }, context) => context.quotas.usage(String(orgId)),
  }),
}));
