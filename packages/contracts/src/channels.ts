/**
 * Pub/sub channel names. Every channel Herald publishes on is built here so that the publisher
 * (a mutation) and the subscriber (a subscription field) can never disagree on a name.
 */

/** Prefix of the per-organisation channel a published post is announced on. */
export const POST_PUBLISHED_CHANNEL_PREFIX = 'post-published';

/** `post-published:<orgId>`: one channel per organisation, so a tenant only ever hears its own posts. */
export function postPublishedChannel(orgId: string): string {
  return `${POST_PUBLISHED_CHANNEL_PREFIX}:${orgId}`;
}

/**
 * The Redis channel a pub/sub channel travels on: `HERALD_REDIS_PREFIX` (default `herald:`) in front,
 * so two installations sharing one Redis never hear each other's events (SPEC §2).
 */
export function redisChannel(prefix: string, channel: string): string {
  return `${prefix}${channel}`;
}
