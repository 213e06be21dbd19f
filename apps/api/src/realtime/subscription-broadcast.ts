import type { ExecutionResult } from 'graphql';
import type { Context } from '../context.js';
import { SubscriptionInterruptedError } from '../errors.js';
import type { ApiMetrics } from '../metrics.js';
import { endFanOutSpan, startFanOutSpan } from './fan-out-span.js';
import type { Group, Position, Recipient, Registry } from './subscription-group-types.js';

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
      const rest = broadcast(registry, group, result);
      if (rest !== undefined) await rest;
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
 * Members written to before the broadcast lets the event loop run (`setImmediate`): a group of
 * thousands (one organisation's subscribers) would otherwise hold the pod for its whole fan-out, every
 * other organisation's frames, requests and publishes waiting behind it. 64 frames are under 1 ms of
 * writes here; a turn of the event loop between slices costs a few µs. 64 rather than 128: another
 * organisation's publish crosses the event loop several times (request, database, Redis, its own
 * fan-out), waiting up to a slice each time (bench/results/noisy-neighbour/slices-64).
 */
export const BROADCAST_SLICE = 64;

/** One event's fan-out to a group, possibly over several turns of the event loop. */
interface Fanout {
  readonly registry: Registry;
  readonly group: Group;
  readonly suffix: Buffer;
  readonly position: Position | undefined;
  readonly emittedAt: number | undefined;
  readonly span: ReturnType<typeof startFanOutSpan> | undefined;
  readonly members: Iterator<Recipient>;
  sent: number;
}

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Writes the event's `next` frame to every member. graphql-ws's `next` message is serialized and UTF-8
 * encoded once per event; only its leading `{"id":…` differs per member. Each member's WebSocket frame
 * (header, id, shared bytes) is built in one Buffer and written straight to its TCP socket: one write
 * and one allocation per delivery, where `ws.send` costs two option objects, a header Buffer and a
 * corked two-buffer writev (bench/results/PROFILE.md).
 *
 * Past {@link BROADCAST_SLICE} members the rest is written over later turns of the event loop, and the
 * returned promise settles when every member was visited (the group's next event waits for it). The
 * members' set is live: one that leaves meanwhile is skipped; one that joins meanwhile is visited (it
 * joined behind the group's last complete broadcast, so this event is one it still needs, unless its
 * own stream delivered it: `skipThrough`).
 * @returns undefined when the event went to every member at once
 */
export function broadcast(registry: Registry, group: Group, result: ExecutionResult): Promise<void> | undefined {
  const event = group.context.event;
  group.context.event = undefined;
  const fanout: Fanout = {
    registry,
    group,
    // One span per group and event, never per socket (fan-out-span.ts); undefined with tracing off.
    span: event?.traceparent === undefined ? undefined : startFanOutSpan(event.traceparent, group.members.size),
    suffix: Buffer.from(`,"type":"next","payload":${JSON.stringify(result)}}`),
    position: event && { epoch: event.epoch, position: event.position },
    emittedAt: event?.emittedAt,
    members: group.members.values(),
    sent: 0,
  };
  if (writeSlice(fanout)) {
    finish(fanout);
    return undefined;
  }
  return writeRest(fanout);
}

async function writeRest(fanout: Fanout): Promise<void> {
  do await nextTurn();
  while (!writeSlice(fanout));
  finish(fanout);
}

/** Writes the frame to the next {@link BROADCAST_SLICE} members. @returns true once every member was visited */
function writeSlice(fanout: Fanout): boolean {
  const { metrics, maxBufferedBytes, onSendError, frames } = fanout.registry;
  const { members, position, suffix } = fanout;
  for (let visited = 0; visited < BROADCAST_SLICE; visited++) {
    const next = members.next();
    if (next.done) return true;
    const member = next.value;
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
    fanout.sent += 1;
  }
  return false;
}

function finish(fanout: Fanout): void {
  const { metrics } = fanout.registry;
  fanout.group.last = fanout.position;
  if (fanout.span) endFanOutSpan(fanout.span, fanout.sent, fanout.suffix.length);
  if (fanout.sent > 0) metrics.eventsDelivered.inc(fanout.sent);
  if (fanout.emittedAt !== undefined) metrics.eventToSendSeconds.observe((Date.now() - fanout.emittedAt) / 1000);
}
