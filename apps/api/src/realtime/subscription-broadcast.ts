import type { ExecutionResult } from 'graphql';
import type { Context } from '../context.js';
import { SubscriptionInterruptedError } from '../errors.js';
import type { ApiMetrics } from '../metrics.js';
import { endFanOutSpan, startFanOutSpan } from './fan-out-span.js';
import type { Group, Position, Registry } from './subscription-group-types.js';

/**
 * A group's one stream and its fan-out (subscription-groups.ts has the design): {@link startGroup} makes
 * a member's stream the group's, `pump` reads it event by event, and `broadcast` writes each event's
 * `next` frame to every member (ws-direct-frames.ts), closing slow consumers on the way. When the stream
 * ends or fails the group is forgotten and its members are ended, a failure as SUBSCRIPTION_INTERRUPTED.
 * This is the hot path: keep its per-member loop free of closures, awaits and allocations beyond the
 * frame itself (bench/results/PROFILE.md).
 */

/** Close code for a consumer too slow to keep up: "Try Again Later". */
export const SLOW_CONSUMER_CLOSE_CODE = 1013;

/** One function for every frame (called only on a failed write): no closure per send. */
export function countSendError(this: ApiMetrics, error?: Error | null) {
  if (error) this.deliveryErrors.inc({ reason: 'send_failed' });
}

/** Starts a group on `stream`, executing with `context` (its first member's). */
export function startGroup(
  registry: Registry,
  key: string,
  stream: AsyncIterator<ExecutionResult>,
  context: Context,
  last?: Position,
): Group {
  // From now on that context serves every member: drop the member's identity so no execution for the
  // group can act with one member's rights (shared fields never read the viewer; one that did fails loudly).
  context.viewer = null;
  const group: Group = { key, members: new Set(), stream, context, last };
  registry.groups.set(key, group);
  registry.metrics.subscriptionGroups.set(registry.groups.size);
  void pump(registry, group);
  return group;
}

async function pump(registry: Registry, group: Group) {
  let failure: Error | undefined;
  try {
    for (;;) {
      const { value: result, done } = await group.stream.next();
      if (done || group.members.size === 0) break;
      broadcast(registry, group, result);
    }
  } catch {
    failure = new SubscriptionInterruptedError();
  } finally {
    const { groups, metrics } = registry;
    if (groups.get(group.key) === group) groups.delete(group.key);
    metrics.subscriptionGroups.set(groups.size);
    const members = [...group.members];
    group.members.clear();
    for (const member of members) member.end(failure);
  }
}

/**
 * Writes the event's `next` frame to every member. graphql-ws's `next` message is serialized and UTF-8
 * encoded once per event; only its leading `{"id":…` differs per member. Each member's WebSocket frame
 * (header, id, shared bytes) is built in one Buffer and written straight to its TCP socket: one write
 * and one allocation per delivery, where `ws.send` costs two option objects, a header Buffer and a
 * corked two-buffer writev (bench/results/PROFILE.md).
 */
function broadcast(registry: Registry, group: Group, result: ExecutionResult) {
  const { metrics, maxBufferedBytes, onSendError, frames } = registry;
  const event = group.context.event;
  // One span per group and event, never per socket (fan-out-span.ts); undefined with tracing off.
  const span = event?.traceparent === undefined ? undefined : startFanOutSpan(event.traceparent, group.members.size);
  const suffix = Buffer.from(`,"type":"next","payload":${JSON.stringify(result)}}`);
  group.context.event = undefined;
  const position: Position | undefined = event && { epoch: event.epoch, position: event.position };
  let sent = 0;
  for (const member of group.members) {
    const { socket } = member;
    const skip = member.skipThrough;
    if (skip !== undefined) {
      if (position && skip.epoch === position.epoch && position.position <= skip.position) continue;
      member.skipThrough = undefined;
    }
    if (socket.readyState !== socket.OPEN) continue;
    if (socket.bufferedAmount > maxBufferedBytes) {
      metrics.slowConsumersClosed.inc();
      socket.close(SLOW_CONSUMER_CLOSE_CODE, 'Try Again Later: too slow to keep up');
      continue;
    }
    frames.send(socket, member.head, member.headBytes, suffix, onSendError);
    sent += 1;
  }
  group.last = position;
  if (span) endFanOutSpan(span, sent, suffix.length);
  if (sent > 0) metrics.eventsDelivered.inc(sent);
  if (event) metrics.eventToSendSeconds.observe((Date.now() - event.emittedAt) / 1000);
}
