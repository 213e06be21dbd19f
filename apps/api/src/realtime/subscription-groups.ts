import type { DocumentNode, ExecutionResult, GraphQLSchema } from 'graphql';
import type { WebSocket } from 'ws';
import type { Context } from '../context.js';
import type { Logger } from '../logger.js';
import type { ApiMetrics } from '../metrics.js';
import { selectionIsViewerIndependent } from './shared-across-viewers.js';
import { countSendError } from './subscription-broadcast.js';
import { Member } from './subscription-group-member.js';
import type { Registry } from './subscription-group-types.js';
import { createDirectFrames } from './ws-direct-frames.js';

/**
 * Shared execution for subscriptions whose results cannot differ between subscribers.
 *
 * Stock graphql-ws runs one execution per event *per subscription* and serializes each result on its
 * own. When thousands of sockets subscribe with the same document and variables, those executions all
 * compute the same bytes. Here such subscribers form a group: each subscriber is still authorized by the
 * real `subscribe` resolver (scope auth: UNAUTHENTICATED/FORBIDDEN exactly as before); the first one's
 * event stream is kept for the group and the others' are closed at once. Per event the group executes
 * once (a fresh execution with the event as root value and fresh per-event loaders),
 * serializes the payload once, and writes one frame per member that differs only in the subscription id.
 *
 * A subscriber never receives a result computed for a viewer with different rights, because only
 * selections whose every field is declared viewer-independent are shared (the field or its parent type
 * carries `extensions.sharedAcrossViewers`; see schema/post.ts), and the group key is the exact
 * document, operation name and variables. Anything else runs the stock per-subscription path.
 *
 * Resuming subscribers (`after`) catch up alone: their own stream replays the history and
 * is executed for them only, until the last event it delivered is at or past the group's last
 * broadcast; then they join the group, which skips them for the events they already have. When no
 * group exists yet and their stream has gone live, their stream becomes the group's.
 *
 * The group executes without a viewer: the first member's context loses its viewer when its stream
 * becomes the group's, so what members receive never depends on who subscribed first.
 *
 * A group whose stream fails ends each member with an `error` (SUBSCRIPTION_INTERRUPTED), never a
 * `complete` that clients would take for a normal end.
 *
 * Slow consumers: a socket whose send buffer is above `maxBufferedBytes` when an event is due is closed
 * (1013, counted), so one stuck client can't grow the server's memory without bound.
 *
 * Where it lives: this file is the registry (`createSubscriptionGroups`: group keys, joining);
 * shared-across-viewers.ts decides what may be shared; subscription-group-member.ts is a member's
 * iterator (joining, catching up, leaving); subscription-broadcast.ts runs a group's stream and writes
 * its frames; subscription-group-types.ts has the shapes they share.
 */

export { SHARED_ACROSS_VIEWERS, selectionIsViewerIndependent } from './shared-across-viewers.js';
export { SLOW_CONSUMER_CLOSE_CODE } from './subscription-broadcast.js';

export interface GroupMember {
  socket: WebSocket;
  /** The graphql-ws subscription id. */
  id: string;
}

export interface SubscriptionGroups {
  /** Frames written straight to a TCP socket (ws-direct-frames.ts), not through `ws.send`: read by tests. */
  readonly directFrames: number;
  /**
   * The key under which `document` + `variables` may share execution, or undefined when the selection
   * touches anything viewer-dependent (then the caller uses the stock path). Leave a resume cursor out
   * of `variables`: resuming subscribers share the group once caught up.
   */
  keyFor(
    document: DocumentNode,
    operationName: string | null | undefined,
    query: string,
    variables: unknown,
  ): string | undefined;
  /**
   * Adds a member to the group `key`, handing over `stream` (the member's own, already authorized
   * subscription) when the group is new, else closing it. With `resuming`, the member first consumes
   * its own stream (its catch-up) and joins once caught up. Returns the iterable graphql-ws waits on for
   * this subscription: while in the group it yields nothing (frames are written directly) and completes
   * when the group ends; its `return()` (client `complete`, socket closed) removes the member.
   */
  join(
    key: string,
    member: GroupMember,
    stream: AsyncIterable<ExecutionResult>,
    context: Context,
    resuming?: boolean,
    /** Called once when the subscription ends, for any reason (done, failed, left). */
    onEnd?: () => void,
  ): AsyncIterableIterator<ExecutionResult>;
  /** Number of live groups (for tests and metrics). */
  readonly size: number;
}

export function createSubscriptionGroups(deps: {
  schema: GraphQLSchema;
  metrics: ApiMetrics;
  maxBufferedBytes: number;
  /** Told, once, when frames cannot be written past `ws.send` (ws-direct-frames.ts). @default nothing logged */
  logger?: Pick<Logger, 'warn'>;
}): SubscriptionGroups {
  const registry: Registry = {
    groups: new Map(),
    metrics: deps.metrics,
    maxBufferedBytes: deps.maxBufferedBytes,
    onSendError: countSendError.bind(deps.metrics),
    frames: createDirectFrames({
      onFallback: (reason) => {
        deps.metrics.fastPathFallback.labels('ws_frames').set(1);
        deps.logger?.warn({ path: 'ws_frames', reason }, 'fast path off: subscription frames go through ws.send');
      },
    }),
  };
  const shareable = new WeakMap<DocumentNode, boolean>();

  function isShareable(document: DocumentNode): boolean {
    let known = shareable.get(document);
    if (known === undefined) {
      known = selectionIsViewerIndependent(deps.schema, document);
      shareable.set(document, known);
    }
    return known;
  }

  return {
    get directFrames() {
      return registry.frames.directFrames;
    },
    keyFor(document, operationName, query, variables) {
      if (!isShareable(document)) return undefined;
      return `${operationName ?? ''}\u0000${query}\u0000${JSON.stringify(variables ?? {})}`;
    },
    join(key, { socket, id }, stream, context, resuming = false, onEnd = undefined) {
      const member = new Member(registry, key, socket, id, stream[Symbol.asyncIterator](), context, onEnd);
      if (!resuming) member.joinNow();
      return member;
    },
    get size() {
      return registry.groups.size;
    },
  };
}
