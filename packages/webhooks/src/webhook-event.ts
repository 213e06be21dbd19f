/**
 * The body of every delivery: `{ id, type, created, data }`. `id` (`evt_…`) is the
 * deduplication key: a retried or replayed delivery carries the same one.
 */
export interface WebhookEvent<T = unknown> {
  /** Event id, like `evt_…`; equal to the `X-Webhook-ID` header. */
  id: string;
  /** Event type, like `post.published`. */
  type: string;
  /** When the event happened, ISO 8601 in UTC. */
  created: string;
  /** Event-specific content; for `post.published`, the published post. */
  data: T;
}

/**
 * Whether a parsed JSON value has the shape of a {@link WebhookEvent}: non-empty string `id` and
 * `type`, a `created` that parses as a date, and a `data` member.
 */
export function isWebhookEvent(value: unknown): value is WebhookEvent {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const { id, type, created } = value as Record<string, unknown>;
  return (
    typeof id === 'string' &&
    id.length > 0 &&
    typeof type === 'string' &&
    type.length > 0 &&
    typeof created === 'string' &&
    !Number.isNaN(Date.parse(created)) &&
    'data' in value
  );
}
