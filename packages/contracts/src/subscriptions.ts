/**
 * Resumable subscriptions (docs/subscriptions.md): the event that travels between pods, and every Redis key and
 * channel of the subscription history. All of them carry the organisation id in a hash tag (`{orgId}`)
 * so that one organisation's history, its counters and its live channel live in the same Redis Cluster
 * slot, and the history append and the publish stay one atomic script.
 */

/** Version of {@link PostPublishedEventV1}; a reader ignores an event whose `v` it doesn't know. */
export const POST_PUBLISHED_EVENT_VERSION = 1;

/** The post as it travels on the wire (camelCase, dates as ISO strings). */
export interface PostPublishedEventPost {
  id: string;
  orgId: string;
  authorId: string;
  title: string;
  tags: string[];
  status: 'DRAFT' | 'PUBLISHED';
  createdAt: string;
  publishedAt: string | null;
  /** The post's insert sequence number, as a decimal string. */
  seq: string;
}

/**
 * A post was published: what the history stores and what pods hand each other. One versioned,
 * camelCase type; never a database row.
 */
export interface PostPublishedEventV1 {
  v: typeof POST_PUBLISHED_EVENT_VERSION;
  /** The outbox event id (`evt_…`): the history stores each id at most once. */
  eventId: string;
  orgId: string;
  post: PostPublishedEventPost;
  /** When the event entered the history (ms since epoch), for the event-to-send latency metric. */
  emittedAt: number;
  /**
   * The W3C `traceparent` of the operation that published it, when tracing was on: each pod's fan-out
   * span joins that trace. Absent otherwise; readers ignore it.
   */
  traceparent?: string;
}

/** An event with its place in its organisation's history. */
export interface HistoryEntry {
  /** 1, 2, 3, … per organisation and epoch, with no gaps. */
  position: number;
  /** Identifies one incarnation of the history; a new epoch starts when the history is lost. */
  epoch: string;
  event: PostPublishedEventV1;
}

/** Suffix of the per-organisation live channel (`<prefix>post-published:{<orgId>}`). */
export const POST_PUBLISHED_LIVE_CHANNEL = 'post-published';
/** Suffix of the per-organisation history stream (`<prefix>history:{<orgId>}`), entry ids `<position>-0`. */
export const SUBSCRIPTION_HISTORY_STREAM = 'history';
/** Suffix of the per-organisation history counters, a hash of `epoch` and `position`. */
export const SUBSCRIPTION_HISTORY_META = 'history-meta';
/** Suffix of the per-organisation sorted set of event ids in the history (score: position), for dedup. */
export const SUBSCRIPTION_HISTORY_IDS = 'history-ids';

export interface SubscriptionRedisKeys {
  /** Live channel every pod subscribes to for the organisation's subscribers. */
  channel: string;
  /** The history stream. */
  history: string;
  /** The history counters (epoch, last position). */
  meta: string;
  /** Event ids in the history (deduplication). */
  ids: string;
}

/** The Redis keys of one organisation's subscription history, for one installation's prefix. */
export function subscriptionRedisKeys(prefix: string, orgId: string): SubscriptionRedisKeys {
  const tag = `{${orgId}}`;
  return {
    channel: `${prefix}${POST_PUBLISHED_LIVE_CHANNEL}:${tag}`,
    history: `${prefix}${SUBSCRIPTION_HISTORY_STREAM}:${tag}`,
    meta: `${prefix}${SUBSCRIPTION_HISTORY_META}:${tag}`,
    ids: `${prefix}${SUBSCRIPTION_HISTORY_IDS}:${tag}`,
  };
}
