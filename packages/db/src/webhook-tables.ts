import type { ColumnType, Generated, Selectable } from 'kysely';

/** A receiver URL registered by an organisation, and the event types it wants. */
export interface WebhookEndpointsTable {
  id: string;
  seq: Generated<string>;
  org_id: string;
  url: string;
  event_types: string[];
  created_at: ColumnType<Date, never, never>;
  /** ENABLED or DISABLED; a disabled endpoint gets SKIPPED deliveries. */
  status: ColumnType<WebhookEndpointStatus, WebhookEndpointStatus | undefined, WebhookEndpointStatus>;
  disabled_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  disabled_reason: ColumnType<string | null, string | null | undefined, string | null>;
  /** First failed attempt of the current failure streak; null after any success. */
  failing_since: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** No attempt before this (a 429/503 with Retry-After slowed the endpoint down). */
  paused_until: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** Set when the endpoint was deleted; its rows are purged in bounded batches in the background. */
  deleted_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /**
   * A JSON object the event body must contain (`jsonb @>`) for the endpoint to get the event; null: no
   * filter. Written as JSON text, read back parsed. `webhook.test` sends ignore it.
   */
  filter: ColumnType<Record<string, unknown> | null, string | null | undefined, string | null>;
  /** Attempts per second at most, across every dispatcher; null: no limit. */
  rate_limit_per_second: ColumnType<number | null, number | null | undefined, number | null>;
  /** FIFO: deliveries strictly one after another in event order (the webhook engine's lease-protocol.ts). */
  ordering: ColumnType<WebhookEndpointOrdering, WebhookEndpointOrdering | undefined, WebhookEndpointOrdering>;
}

export type WebhookEndpointOrdering = 'UNORDERED' | 'FIFO';

export type WebhookEndpointStatus = 'ENABLED' | 'DISABLED';

/** A signing secret of an endpoint; `expires_at` is set on the old one when the secret is rotated. */
export interface WebhookEndpointSecretsTable {
  id: Generated<string>;
  endpoint_id: string;
  /**
   * The secret, sealed (secret-envelope.ts): the HMAC key of the `X-Webhook-Signature` scheme exactly
   * as the receiver was given it, or an ed25519 signing key (`whsk_…`) for an endpoint with asymmetric
   * `v1a` signatures. Null only on a row written before encryption at rest that no start has sealed yet.
   */
  sealed_secret: string | null;
  /**
   * Plaintext of a row written before encryption at rest; every start seals it into `sealed_secret`
   * and sets it to null (webhook-secrets-at-rest.ts). Never written, never read for signing.
   */
  secret: ColumnType<string | null, null | undefined, null>;
  created_at: ColumnType<Date, never, never>;
  expires_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
}

/** The transactional outbox: one row per event, written with the change that caused it. */
export interface WebhookOutboxTable {
  /** The event id, `evt_…`. */
  id: string;
  seq: Generated<string>;
  org_id: string;
  type: string;
  /** The exact JSON body (`{id, type, created, data}`) that every attempt signs and sends. */
  body: string;
  created_at: ColumnType<Date, Date | undefined, never>;
  /** When a relay last handed the event to the queue; null until then. */
  relayed_at: ColumnType<Date | null, never, Date | null>;
  /**
   * Set when the event was recorded with nothing to fan out. An event recorded without it waits in
   * {@link WebhookOutboxPendingTable} until a dispatcher creates its deliveries (its queue row is deleted).
   */
  dispatched_at: ColumnType<Date | null, never, Date | null>;
  /** Set for an event meant for one endpoint only (`webhook.test`). */
  target_endpoint_id: ColumnType<string | null, string | null | undefined, never>;
  /** Set for an operational event: never delivered to the endpoint it is about. */
  exclude_endpoint_id: ColumnType<string | null, string | null | undefined, never>;
  /** The W3C `traceparent` of the operation that wrote the event; null when tracing was off. */
  traceparent: ColumnType<string | null, string | null | undefined, never>;
}

/**
 * The events still to fan out, oldest first: a row per outbox event recorded without `dispatched_at`,
 * written by a trigger in the statement that records the event, deleted by the fan-out that creates the
 * event's deliveries. "Not fanned out yet" is "has a row here".
 */
export interface WebhookOutboxPendingTable {
  seq: string;
}

export type WebhookDeliveryStatus = 'PENDING' | 'SUCCEEDED' | 'DEAD' | 'SKIPPED';

/** One event to one endpoint, with its retry state. */
export interface WebhookDeliveriesTable {
  id: string;
  seq: Generated<string>;
  event_id: string;
  endpoint_id: string;
  org_id: string;
  event_type: string;
  status: ColumnType<WebhookDeliveryStatus, WebhookDeliveryStatus | undefined, WebhookDeliveryStatus>;
  attempt_count: ColumnType<number, number | undefined, number>;
  /** When the next attempt is due; null once SUCCEEDED or DEAD. */
  next_attempt_at: Date | null;
  /** The retry horizon counts from here: the delivery's creation, or its last replay. */
  horizon_from: ColumnType<Date, Date | undefined, Date>;
  /** `q:…` while queued, `a:…` while an attempt runs; see the migration. */
  lease_token: string | null;
  leased_until: Date | null;
  created_at: ColumnType<Date, never, never>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
  /** When a DEAD delivery was written to the dead-letter stream (the alerting feed); null until then. */
  dead_letter_streamed_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /**
   * A FIFO endpoint's delivery: its place in the endpoint's line (its event's outbox `seq`, or a fresh
   * one from that sequence when replayed). Null for an unordered endpoint's.
   */
  fifo_seq: ColumnType<string | null, string | null | undefined, string | null>;
  /**
   * The successful attempt, kept on the row by the record that set SUCCEEDED (not in `webhook_attempts`);
   * null otherwise. Read a delivery's attempts from `webhook_attempt_log`, which lists both.
   */
  succeeded_at: ColumnType<Date | null, never, Date | null>;
  success_status_code: ColumnType<number | null, never, number | null>;
  success_duration_ms: ColumnType<number | null, never, number | null>;
  success_response_body: ColumnType<string | null, never, string | null>;
}

/**
 * The per-endpoint cap's registry: one row per lane (an endpoint and the a-lease a dispatcher holds its
 * deliveries under), saying how many POSTs the lane may have in flight; counted while `leased_until`
 * is ahead (the webhook engine's lease-protocol.ts, steps 3 and 3b).
 */
export interface WebhookEndpointSlotsTable {
  endpoint_id: string;
  lease: string;
  slots: number;
  leased_until: Date;
}

/**
 * Every attempt of a delivery, one list (a view): the rows of `webhook_attempts` and each delivery's
 * folded success (`id` null: always its delivery's last attempt).
 */
export interface WebhookAttemptLogView {
  id: string | null;
  delivery_id: string;
  at: Date;
  status_code: number | null;
  duration_ms: number;
  error: string | null;
  response_body: string | null;
}

/** One HTTP attempt of a delivery that failed, or was recorded after its lease was lost. */
export interface WebhookAttemptsTable {
  id: Generated<string>;
  delivery_id: string;
  at: Date;
  /** The HTTP status, null when no response arrived (timeout, connection error, refused address). */
  status_code: number | null;
  duration_ms: number;
  error: string | null;
  /** The first bytes of the receiver's answer (bounded), null when none arrived. */
  response_body: ColumnType<string | null, string | null | undefined, never>;
}

/** Embedded mode's work queue (the Redis stream's stand-in). */
export interface WebhookQueueTable {
  id: Generated<string>;
  message: ColumnType<unknown, string, never>;
  claimed_at: Date | null;
}

export type WebhookEndpoint = Selectable<WebhookEndpointsTable>;
export type WebhookOutboxEvent = Selectable<WebhookOutboxTable>;
export type WebhookDelivery = Selectable<WebhookDeliveriesTable>;
export type WebhookAttempt = WebhookAttemptLogView;
