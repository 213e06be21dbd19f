import type { TenantLimits } from '../tenancy/quotas.js';

/** What each quota limits: the description of its field in the organisation limits types and their input. */
export const QUOTA_DESCRIPTIONS: Record<keyof TenantLimits, string> = {
  operationsPerSecond: 'GraphQL operations per second over HTTP and WebSocket (a burst of one second passes).',
  publishesPerSecond: '`publishPost` per second.',
  socketsPerUser: "Open WebSockets per user (the largest among a user's organisations applies).",
  subscriptions: 'Active subscriptions in the organisation.',
  webhookAttemptsInFlight:
    'Webhook delivery attempts in flight at once, across all dispatchers (deliveries over it wait, never fail).',
};
