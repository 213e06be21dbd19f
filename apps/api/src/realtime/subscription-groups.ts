import type { DocumentNode, ExecutionResult, GraphQLSchema } from 'graphql';
import { getNamedType, isObjectType, TypeInfo, visit, visitWithTypeInfo } from 'graphql';
import type { WebSocket } from 'ws';
import type { Context } from '../context.js';
import { SubscriptionInterruptedError } from '../errors.js';
import type { ApiMetrics } from '../metrics.js';

/**
 * Shared execution for subscriptions whose results cannot differ between subscribers.
 *
 * Stock graphql-ws runs one execution per event *per subscription* and serializes each result on its
 * own. When thousands of sockets subscribe with the same document and variables, those executions all
 * compute the same bytes. Here such subscribers form a group: each subscriber is still authorized by the
 * real `subscribe` resolver (scope auth: UNAUTHENTICATED/FORBIDDEN exactly as before); the first one's
 * event stream is kept for the group and the others' are closed at once. Per event the group executes
 * once (a fresh execution with the event as root value and fresh per-event loaders, as seed §6.1 asks),
 * serializes the payload once, and writes one frame per member that differs only in the subscription id.
 *
 * A subscriber never receives a result computed for a viewer with different rights, because only
 * selections whose every field is declared viewer-independent are shared (the field or its parent type
 * carries `extensions.sharedAcrossViewers`; see schema/post.ts), and the group key is the exact
 * document, operation name and variables. Anything else runs the stock per-subscription path.
 *
 * Resuming subscribers (`after`, SPEC §6.1) catch up alone: their own stream replays the history and
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
 */

/** Extension flag on an object type or field: its resolution doesn't depend on who is asking. */
export const SHARED_ACROSS_VIEWERS = 'sharedAcrossViewers';
/** Close code for a consumer too slow to keep up: "Try Again Later". */
export const SLOW_CONSUMER_CLOSE_CODE = 1013;

export interface GroupMember {
  socket: WebSocket;
  /** The graphql-ws subscription id. */
  id: string;
}

/** A place in an organisation's history. */
interface Position {
  epoch: string;
  position: number;
}

export interface SubscriptionGroups {
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
  ): AsyncIterableIterator<ExecutionResult>;
  /** Number of live groups (for tests and metrics). */
  readonly size: number;
}

interface Membership {
  /** `{"id":<subscription id>` as bytes: the only part of a `next` frame that differs per member. */
  prefix: Buffer;
  /** Events at or before this were delivered to the member before it joined. */
  skipThrough: Position | undefined;
  done: (value: IteratorResult<never>) => void;
  fail: (error: Error) => void;
}

interface Group {
  members: Map<GroupMember, Membership>;
  stream: AsyncIterator<ExecutionResult>;
  /** The context the stream executes with: where the resolver leaves each event's position. */
  context: Context;
  /** The last event broadcast. */
  last: Position | undefined;
}

/** ws send options of every `next` frame: a text frame (the bytes are UTF-8 JSON), not compressed. */
const TEXT_FRAME = { binary: false, compress: false } as const;

/** One function for every frame (ws calls it only on a failed write): no closure per send. */
function countSendError(this: ApiMetrics, error?: Error) {
  if (error) this.deliveryErrors.inc({ reason: 'send_failed' });
}

export function createSubscriptionGroups(deps: {
  schema: GraphQLSchema;
  metrics: ApiMetrics;
  maxBufferedBytes: number;
}): SubscriptionGroups {
  const { metrics } = deps;
  const groups = new Map<string, Group>();
  const shareable = new WeakMap<DocumentNode, boolean>();
  const onSendError = countSendError.bind(metrics);

  function isShareable(document: DocumentNode): boolean {
    let known = shareable.get(document);
    if (known === undefined) {
      known = selectionIsViewerIndependent(deps.schema, document);
      shareable.set(document, known);
    }
    return known;
  }

  async function pump(key: string, group: Group) {
    let failure: Error | undefined;
    try {
      for (;;) {
        const { value: result, done } = await group.stream.next();
        if (done || group.members.size === 0) break;
        broadcast(group, result);
      }
    } catch {
      failure = new SubscriptionInterruptedError();
    } finally {
      if (groups.get(key) === group) groups.delete(key);
      metrics.subscriptionGroups.set(groups.size);
      for (const membership of group.members.values()) {
        if (failure) membership.fail(failure);
        else membership.done({ done: true, value: undefined });
      }
      group.members.clear();
    }
  }

  function broadcast(group: Group, result: ExecutionResult) {
    // graphql-ws's `next` message, serialized once; only the leading id differs per member.
    // Serialized and UTF-8 encoded once per event; each member's frame is one Buffer of its prefix and
    // this suffix (a copy, no per-socket string concatenation and encoding).
    const suffix = Buffer.from(`,"type":"next","payload":${JSON.stringify(result)}}`);
    const event = group.context.event;
    group.context.event = undefined;
    const position: Position | undefined = event && { epoch: event.epoch, position: event.position };
    let sent = 0;
    for (const [member, membership] of group.members) {
      const { socket } = member;
      const skip = membership.skipThrough;
      if (skip && position && skip.epoch === position.epoch && position.position <= skip.position) continue;
      membership.skipThrough = undefined;
      if (socket.readyState !== socket.OPEN) continue;
      if (socket.bufferedAmount > deps.maxBufferedBytes) {
        metrics.slowConsumersClosed.inc();
        socket.close(SLOW_CONSUMER_CLOSE_CODE, 'Try Again Later: too slow to keep up');
        continue;
      }
      socket.send(Buffer.concat([membership.prefix, suffix]), TEXT_FRAME, onSendError);
      sent += 1;
    }
    group.last = position;
    if (sent > 0) metrics.eventsDelivered.inc(sent);
    if (event) metrics.eventToSendSeconds.observe((Date.now() - event.emittedAt) / 1000);
  }

  function startGroup(key: string, stream: AsyncIterator<ExecutionResult>, context: Context, last?: Position) {
    // The stream executes with the context it was subscribed with, its first member's. From now on that
    // context serves every member: drop the member's identity so no execution for the group can act
    // with one member's rights (shared fields never read the viewer; one that did fails loudly).
    context.viewer = null;
    const group: Group = { members: new Map(), stream, context, last };
    groups.set(key, group);
    metrics.subscriptionGroups.set(groups.size);
    void pump(key, group);
    return group;
  }

  /** Adds `member` to `group`; returns what graphql-ws waits on and how to leave. */
  function enter(key: string, group: Group, member: GroupMember, skipThrough: Position | undefined) {
    let done!: (value: IteratorResult<never>) => void;
    let fail!: (error: Error) => void;
    const finished = new Promise<IteratorResult<never>>((resolve, reject) => {
      done = resolve;
      fail = reject;
    });
    // Nobody may be waiting when the group fails after the member left: keep that from being unhandled.
    finished.catch(() => {});
    group.members.set(member, { prefix: Buffer.from(`{"id":${JSON.stringify(member.id)}`), skipThrough, done, fail });
    const leave = () => {
      const membership = group.members.get(member);
      if (!membership) return;
      group.members.delete(member);
      membership.done({ done: true, value: undefined });
      if (group.members.size === 0) {
        if (groups.get(key) === group) groups.delete(key);
        metrics.subscriptionGroups.set(groups.size);
        void group.stream.return?.();
      }
    };
    return { finished, leave };
  }

  return {
    keyFor(document, operationName, query, variables) {
      if (!isShareable(document)) return undefined;
      return `${operationName ?? ''}\u0000${query}\u0000${JSON.stringify(variables ?? {})}`;
    },
    join(key, member, stream, context, resuming = false) {
      let membership: { finished: Promise<IteratorResult<never>>; leave: () => void } | undefined;
      let own: AsyncIterator<ExecutionResult> | undefined = stream[Symbol.asyncIterator]();
      let lastYielded: Position | undefined;
      let lastLive = false;

      if (!resuming) {
        const existing = groups.get(key);
        if (existing) {
          // Authorized already; the group's stream serves this member, so its own is closed.
          void own.return?.();
          membership = enter(key, existing, member, undefined);
        } else {
          membership = enter(key, startGroup(key, own, context), member, undefined);
        }
        own = undefined;
        // A member that is not catching up never reads its own context again (the group runs on its first
        // member's): drop it, or the closures below would keep it and its auth caches per socket.
        context = undefined as unknown as Context;
      }

      /** A resuming member joins once its own stream delivered what the group last broadcast. */
      const tryJoin = (): boolean => {
        // Not before its own stream is live: replayed events were never the group's to broadcast.
        if (!own || !lastYielded || !lastLive) return false;
        const group = groups.get(key);
        if (group) {
          const last = group.last;
          if (last && (last.epoch !== lastYielded.epoch || last.position > lastYielded.position)) return false;
          void own.return?.();
          membership = enter(key, group, member, lastYielded);
        } else {
          membership = enter(key, startGroup(key, own, context, lastYielded), member, undefined);
        }
        own = undefined;
        return true;
      };

      const iterator: AsyncIterableIterator<ExecutionResult> = {
        [Symbol.asyncIterator]() {
          return iterator;
        },
        async next() {
          if (membership || tryJoin()) return membership?.finished as Promise<IteratorResult<never>>;
          const result = await (own as AsyncIterator<ExecutionResult>).next();
          const event = context.event;
          if (!result.done && event) {
            lastYielded = { epoch: event.epoch, position: event.position };
            lastLive = !event.replayed;
          }
          return result;
        },
        async return() {
          membership?.leave();
          await own?.return?.();
          return { done: true, value: undefined };
        },
        async throw(error?: unknown) {
          membership?.leave();
          await own?.return?.();
          throw error;
        },
      };
      return iterator;
    },
    get size() {
      return groups.size;
    },
  };
}

/**
 * True when every field the subscription selects is declared viewer-independent: the root field by its
 * own `sharedAcrossViewers` extension, every other field by its parent type's.
 */
export function selectionIsViewerIndependent(schema: GraphQLSchema, document: DocumentNode): boolean {
  const operations = document.definitions.filter((definition) => definition.kind === 'OperationDefinition');
  if (operations.length !== 1 || operations[0]?.operation !== 'subscription') return false;
  const subscriptionType = schema.getSubscriptionType();
  const typeInfo = new TypeInfo(schema);
  let independent = true;
  visit(
    document,
    visitWithTypeInfo(typeInfo, {
      Field() {
        const parent = typeInfo.getParentType();
        const field = typeInfo.getFieldDef();
        if (!parent || !field) {
          independent = false;
          return;
        }
        if (field.name === '__typename') return;
        const flagged =
          parent === subscriptionType
            ? field.extensions?.[SHARED_ACROSS_VIEWERS] === true
            : isObjectType(getNamedType(parent)) && parent.extensions?.[SHARED_ACROSS_VIEWERS] === true;
        if (!flagged) independent = false;
      },
    }),
  );
  return independent;
}
