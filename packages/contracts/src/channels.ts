import { subscriptionRedisKeys } from './subscriptions.js';
import { DEFAULT_REDIS_PREFIX } from './webhooks.js';

/**
 * Pub/sub channel names. The channel a published post is announced on is built in one place,
 * {@link subscriptionRedisKeys} (with the history keys it must share a Redis Cluster slot with), so
 * that the publisher (the history script) and the subscribers can never disagree on a name.
 */

/** Prefix (after `HERALD_REDIS_PREFIX`) of the per-organisation channel a published post is announced on. */
export const POST_PUBLISHED_CHANNEL_PREFIX = 'post-published';

/** `<prefix>post-published:{<orgId>}`: one channel per organisation, so a tenant only ever hears its own posts. */
export function postPublishedChannel(orgId: string, prefix: string = DEFAULT_REDIS_PREFIX): string {
  return subscriptionRedisKeys(prefix, orgId).channel;
}

/**
 * The Redis channel a pub/sub channel travels on: `HERALD_REDIS_PREFIX` (default `herald:`) in front,
 * so two installations sharing one Redis never hear each other's events.
 */
export function redisChannel(prefix: string, channel: string): string {
  return `${prefix}${channel}`;
}
