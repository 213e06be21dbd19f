/**
 * Webhook names shared by the API (which records events) and the dispatcher (which delivers them):
 * event types, id prefixes, and every Redis key the dispatcher uses. Keys are built from a prefix
 * (`HERALD_REDIS_PREFIX`, default `herald:`) so that several Herald installations, or parallel test
 * runs, can share one Redis without seeing each other's work.
 */

/**
 * The PostgreSQL NOTIFY channel of outbox commits: the API notifies it when it records an event, the
 * dispatchers listen on it. The payload is the writer's `current_schema()`, so dispatchers of other
 * installations (or test schemas) in the same database ignore it.
 */
export const OUTBOX_NOTIFY_CHANNEL = 'herald_webhook_outbox';

/** Event type sent when a draft post is published. */
export const POST_PUBLISHED_EVENT = 'post.published';

/** Event type of `sendTestWebhook`: delivered to the one endpoint it targets. */
export const WEBHOOK_TEST_EVENT = 'webhook.test';
/** Operational event: an endpoint was disabled; data `{ endpointId, url, reason, disabledAt }`. */
export const WEBHOOK_ENDPOINT_DISABLED_EVENT = 'webhook.endpoint.disabled';
/**
 * Operational event: a delivery ran out of retries; data `{ deliveryId, endpointId, eventId,
 * eventType, attempts, lastError }`.
 */
export const WEBHOOK_DELIVERY_DEAD_EVENT = 'webhook.delivery.dead';

/** Every event type an endpoint may subscribe to. Additive only: receivers rely on these names. */
export const WEBHOOK_EVENT_TYPES = [
  POST_PUBLISHED_EVENT,
  WEBHOOK_TEST_EVENT,
  WEBHOOK_ENDPOINT_DISABLED_EVENT,
  WEBHOOK_DELIVERY_DEAD_EVENT,
] as const;

export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/** Event ids look like `evt_…`; the id is the receiver's deduplication key. */
export const WEBHOOK_EVENT_ID_PREFIX = 'evt_';
/** Webhook endpoint ids look like `we_…`. */
export const WEBHOOK_ENDPOINT_ID_PREFIX = 'we_';
/** Delivery ids (one event to one endpoint) look like `del_…`. */
export const WEBHOOK_DELIVERY_ID_PREFIX = 'del_';

/** Prefix of every Redis key Herald writes, unless `HERALD_REDIS_PREFIX` says otherwise. */
export const DEFAULT_REDIS_PREFIX = 'herald:';

/**
 * Stream of dispatcher work (suffix of the prefixed key). Entries are either `event` (fan an outbox
 * event out to the organisation's endpoints) or `delivery` (make one attempt of one delivery). The
 * database stays the source of truth; this stream only distributes work among dispatchers.
 */
export const WEBHOOK_WORK_STREAM = '{webhooks}:work';

/**
 * Stream where deliveries that ran out of retries are parked for operators (suffix of the prefixed
 * key). One entry per delivery that went DEAD; `dlq replay` removes it.
 */
export const WEBHOOK_DEAD_LETTER_STREAM = '{webhooks}:dead-letters';

/**
 * Stream where work entries that kept failing are parked after a bounded number of receives (suffix
 * of the prefixed key). The database still holds their deliveries: the scheduler hands them out again.
 */
export const WEBHOOK_PARKED_STREAM = 'webhooks:parked';

/**
 * Pub/sub channel (suffix of the prefixed name) on which API pods wake the dispatchers' relays right
 * after committing outbox events, in cluster mode: a NOTIFY in the publishing transaction would
 * serialise those commits (PostgreSQL holds one global lock across the WAL flush of every transaction
 * that sent NOTIFY). Same hash tag as the streams; sharded pub/sub on Redis Cluster.
 */
export const WEBHOOK_OUTBOX_WAKE_CHANNEL = '{webhooks}:outbox-wake';

/**
 * Prefix (after the installation prefix) of the per-endpoint rate-limit keys: one string per endpoint,
 * `…webhooks:rate:{<endpointId>}`, holding its next free send time (endpoint-rate.ts). The endpoint id
 * is the key's hash tag, so endpoints spread over a Redis Cluster's slots.
 */
export const WEBHOOK_ENDPOINT_RATE_PREFIX = 'webhooks:rate:';

/**
 * Prefix of the per-organisation in-flight permit keys: one hash per organisation,
 * `…webhooks:in-flight:{<orgId>}`, one field per dispatcher (org-permits.ts).
 */
export const WEBHOOK_ORG_IN_FLIGHT_PREFIX = 'webhooks:in-flight:';

/**
 * Sorted set of live dispatchers (member: consumer name, score: when its presence lapses, ms since
 * epoch): how many dispatchers share a throttle while Redis is unreachable.
 */
export const WEBHOOK_DISPATCHERS_KEY = 'webhooks:dispatchers';

/** Consumer group on {@link WEBHOOK_WORK_STREAM} shared by every dispatcher replica. */
export const WEBHOOK_CONSUMER_GROUP = 'webhook-dispatchers';

export interface WebhookRedisKeys {
  /**
   * The work stream, `<prefix>{webhooks}:work`. The `{webhooks}` hash tag puts both streams in one Redis
   * Cluster slot, so a command or script touching both stays legal (no CROSSSLOT); a prefix must not
   * contain braces of its own (the first `{…}` of a key is its tag).
   */
  workStream: string;
  /** The dead-letter stream, `<prefix>{webhooks}:dead-letters` (same slot as the work stream). */
  deadLetterStream: string;
  /** Work entries parked after too many receives, `<prefix>webhooks:parked`. */
  parkedStream: string;
  /** The consumer group on the work stream (a name inside the stream, not a key: never prefixed). */
  consumerGroup: string;
  /** The relay wake-up channel, `<prefix>{webhooks}:outbox-wake` (see {@link WEBHOOK_OUTBOX_WAKE_CHANNEL}). */
  outboxWakeChannel: string;
  /** The rate-limit key of one endpoint (see {@link WEBHOOK_ENDPOINT_RATE_PREFIX}). */
  endpointRate(endpointId: string): string;
  /** The in-flight permits hash of one organisation (see {@link WEBHOOK_ORG_IN_FLIGHT_PREFIX}). */
  orgInFlight(orgId: string): string;
  /** The live dispatchers, `<prefix>webhooks:dispatchers` (see {@link WEBHOOK_DISPATCHERS_KEY}). */
  dispatchers: string;
}

/** The Redis keys for one installation. */
export function webhookRedisKeys(prefix: string = DEFAULT_REDIS_PREFIX): WebhookRedisKeys {
  return {
    workStream: `${prefix}${WEBHOOK_WORK_STREAM}`,
    deadLetterStream: `${prefix}${WEBHOOK_DEAD_LETTER_STREAM}`,
    parkedStream: `${prefix}${WEBHOOK_PARKED_STREAM}`,
    consumerGroup: WEBHOOK_CONSUMER_GROUP,
    outboxWakeChannel: `${prefix}${WEBHOOK_OUTBOX_WAKE_CHANNEL}`,
    endpointRate: (endpointId) => `${prefix}${WEBHOOK_ENDPOINT_RATE_PREFIX}{${endpointId}}`,
    orgInFlight: (orgId) => `${prefix}${WEBHOOK_ORG_IN_FLIGHT_PREFIX}{${orgId}}`,
    dispatchers: `${prefix}${WEBHOOK_DISPATCHERS_KEY}`,
  };
}
