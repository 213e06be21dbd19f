import type { Migration, MigrationProvider } from 'kysely';
import * as createUsersAndPosts from './2026-11-21T07-30_create-users-and-posts.js';
import * as createWebhooks from './2026-11-21T08-00_create-webhooks.js';
import * as indexDueWebhookDeliveries from './2026-11-21T08-30_index-due-webhook-deliveries.js';
import * as webhookEndpointHealth from './2026-11-23T11-00_webhook-endpoint-health.js';
import * as webhooksOpsStandardSecrets from './2026-11-23T11-20_webhooks-ops-standard-secrets.js';
import * as engineStraightPath from './2026-11-23T11-35_engine-straight-path.js';
import * as resumeSubscriptionHistory from './2026-11-23T11-45_resume-subscription-history.js';
import * as historyDirectAppend from './2026-11-26T13-30_history-direct-append.js';
import * as webhookEndpointSlots from './2026-11-27T00-30_webhook-endpoint-slots.js';
import * as webhookHotPathWithoutForeignKeys from './2026-11-27T07-30_webhook-hot-path-without-foreign-keys.js';
import * as organizationLimits from './2026-11-28T13-30_organization-limits.js';
import * as webhookSecretsSealed from './2026-11-28T13-30_webhook-secrets-sealed.js';
import * as outboxTraceContext from './2026-11-28T17-10_outbox-trace-context.js';
import * as webhookFifoEndpoints from './2026-11-28T17-20_webhook-fifo-endpoints.js';
import * as webhookEndpointFilter from './2026-11-28T17-30_webhook-endpoint-filter.js';
import * as webhookThrottles from './2026-11-28T17-40_webhook-throttles.js';
import * as webhookSuccessFolded from './2026-11-30T15-00_webhook-success-folded.js';
import * as webhookFanOutFunction from './2026-11-30T18-00_webhook-fan-out-function.js';
import * as webhookOrgOrderIndex from './2026-12-01T00-30_webhook-org-order-index.js';
import * as postsTagsWithoutNull from './2026-12-01T06-00_posts-tags-without-null.js';
import * as webhookClaimFunctions from './2026-12-01T12-00_webhook-claim-functions.js';
import * as webhookOutboxPending from './2026-12-02T08-00_webhook-outbox-pending.js';

/**
 * Every migration, by name. Names sort in the order they run (timestamp first); a landed migration
 * is never edited, a change is a new file listed here. Listed statically rather than read from disk so
 * that the same list works under tsx, vitest and a bundled build.
 */
const MIGRATIONS: Record<string, Migration> = {
  '2026-11-21T07-30_create-users-and-posts': createUsersAndPosts,
  '2026-11-21T08-00_create-webhooks': createWebhooks,
  '2026-11-21T08-30_index-due-webhook-deliveries': indexDueWebhookDeliveries,
  '2026-11-23T11-00_webhook-endpoint-health': webhookEndpointHealth,
  '2026-11-23T11-20_webhooks-ops-standard-secrets': webhooksOpsStandardSecrets,
  '2026-11-23T11-35_engine-straight-path': engineStraightPath,
  '2026-11-23T11-45_resume-subscription-history': resumeSubscriptionHistory,
  '2026-11-26T13-30_history-direct-append': historyDirectAppend,
  '2026-11-27T00-30_webhook-endpoint-slots': webhookEndpointSlots,
  '2026-11-27T07-30_webhook-hot-path-without-foreign-keys': webhookHotPathWithoutForeignKeys,
  '2026-11-28T13-30_organization-limits': organizationLimits,
  '2026-11-28T13-30_webhook-secrets-sealed': webhookSecretsSealed,
  '2026-11-28T17-10_outbox-trace-context': outboxTraceContext,
  '2026-11-28T17-20_webhook-fifo-endpoints': webhookFifoEndpoints,
  '2026-11-28T17-30_webhook-endpoint-filter': webhookEndpointFilter,
  '2026-11-28T17-40_webhook-throttles': webhookThrottles,
  '2026-11-30T15-00_webhook-success-folded': webhookSuccessFolded,
  '2026-11-30T18-00_webhook-fan-out-function': webhookFanOutFunction,
  '2026-12-01T00-30_webhook-org-order-index': webhookOrgOrderIndex,
  '2026-12-01T06-00_posts-tags-without-null': postsTagsWithoutNull,
  '2026-12-01T12-00_webhook-claim-functions': webhookClaimFunctions,
  '2026-12-02T08-00_webhook-outbox-pending': webhookOutboxPending,
};

export const migrationProvider: MigrationProvider = {
  async getMigrations() {
    return MIGRATIONS;
  },
};
