import type { ColumnType, Generated, Insertable, Selectable, Updateable } from 'kysely';
import type {
  WebhookAttemptLogView,
  WebhookAttemptsTable,
  WebhookDeliveriesTable,
  WebhookEndpointSecretsTable,
  WebhookEndpointSlotsTable,
  WebhookEndpointsTable,
  WebhookOutboxPendingTable,
  WebhookOutboxTable,
  WebhookQueueTable,
} from './webhook-tables.js';

/**
 * The tables Herald's code reads and writes, as Kysely sees them. Migrations (in `migrations/`) are
 * the source of truth for the SQL; this file must follow them.
 */
export interface Database {
  users: UsersTable;
  posts: PostsTable;
  webhook_endpoints: WebhookEndpointsTable;
  webhook_endpoint_secrets: WebhookEndpointSecretsTable;
  webhook_outbox: WebhookOutboxTable;
  webhook_outbox_pending: WebhookOutboxPendingTable;
  webhook_deliveries: WebhookDeliveriesTable;
  webhook_endpoint_slots: WebhookEndpointSlotsTable;
  webhook_attempts: WebhookAttemptsTable;
  webhook_attempt_log: WebhookAttemptLogView;
  webhook_queue: WebhookQueueTable;
  organization_limits: OrganizationLimitsTable;
}

/** Per-organisation quota overrides: null keeps the environment's default, 0 means no limit. */
export interface OrganizationLimitsTable {
  org_id: string;
  operations_per_second: number | null;
  publishes_per_second: number | null;
  sockets_per_user: number | null;
  subscriptions: number | null;
  updated_at: ColumnType<Date, Date | undefined, Date>;
  /** Webhook attempts in flight across all dispatchers (`TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT`). */
  webhook_attempts_in_flight: ColumnType<number | null, number | null | undefined, number | null>;
}

/** A user as last seen in a token. Authors of posts are users. */
export interface UsersTable {
  id: string;
  name: string;
  created_at: ColumnType<Date, never, never>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

export type PostStatus = 'DRAFT' | 'PUBLISHED';

export interface PostsTable {
  id: string;
  org_id: string;
  author_id: string;
  title: string;
  tags: string[];
  status: ColumnType<PostStatus, PostStatus | undefined, PostStatus>;
  created_at: ColumnType<Date, never, never>;
  published_at: ColumnType<Date | null, never, Date>;
  /** Increments on each insert; a tie-breaker for ordering rows created in the same microsecond. */
  seq: Generated<string>;
}

export type User = Selectable<UsersTable>;
export type NewUser = Insertable<UsersTable>;
export type Post = Selectable<PostsTable>;
export type NewPost = Insertable<PostsTable>;
export type PostUpdate = Updateable<PostsTable>;
