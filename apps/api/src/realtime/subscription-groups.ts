import type { DocumentNode, ExecutionResult, GraphQLSchema } from 'graphql';
import { getNamedType, isObjectType, TypeInfo, visit, visitWithTypeInfo } from 'graphql';
import type { WebSocket } from 'ws';
import type { Context } from '../context.js';
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
 * Slow consumers: a socket whose send buffer is above `maxBufferedBytes` when an event is due is closed
 * (1013, counted), so one stuck client can't grow the server's memory without bound.
 */

/** Extension flag on an object type or field: its resolution doesn't depend on who is asking. */
export const SHARED_ACROSS_VIEWERS = 'sharedAcrossViewers';
/** Close code for a consumer too slow to keep up: "Try Again Later". */
export const SLOW_CONSUMER_CLOSE_CODE = 1013;
/** ws send options of every `next` frame: a text frame (the bytes are UTF-8 JSON), not compressed. */
const TEXT_FRAME = { binary: false, compress: false } as const;

export interface GroupMember {
  socket: WebSocket;
  /** The graphql-ws subscription id. */
  id: string;
}

export interface SubscriptionGroups {
  /**
   * The key under which `document` + `variables` may share execution, or undefined when the selection
   * touches anything viewer-dependent (then the caller uses the stock path).
   */
  keyFor(
    document: DocumentNode,
    operationName: string | null | undefined,
    query: string,
    variables: unknown,
  ): string | undefined;
  /**
   * Adds a member to the group `key`, handing over `stream` (the member's own, already authorized
   * subscription) when the group is new, else closing it. Returns the iterable graphql-ws waits on for
   * this subscription: it never yields (frames are written directly) and completes when the group ends;
   * its `return()` (client `complete`, socket closed) removes the member.
   */
  join(
    key: string,
    member: GroupMember,
    stream: AsyncIterable<ExecutionResult>,
    context: Context,
  ): AsyncIterableIterator<never>;
  /** Number of live groups (for tests and metrics). */
  readonly size: number;
}

interface Group {
  key: string;
  members: Map<GroupMember, MemberSubscription>;
  stream: AsyncIterator<ExecutionResult>;
  context: Context;
}

const DONE: IteratorResult<never> = Object.freeze({ done: true, value: undefined });

/**
 * What graphql-ws waits on for one grouped subscription. A class, not an object of closures: tens of
 * thousands of these live at once, and per-instance closures, a promise made before anyone waits and an
 * async `next` (a suspended generator each) were a third of a subscribed socket's heap (bench/results/PROFILE.md).
 */
class MemberSubscription implements AsyncIterableIterator<never> {
  /** `{"id":<subscription id>` as bytes: the only part of a `next` frame that differs per member. */
  readonly prefix: Buffer;
  private resolveNext: ((value: IteratorResult<never>) => void) | undefined;
  private ended = false;

  constructor(
    private readonly group: Group,
    private readonly member: GroupMember,
    private readonly onLeave: (group: Group) => void,
  ) {
    this.prefix = Buffer.from(`{"id":${JSON.stringify(member.id)}`);
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  /** Never yields (frames are written directly); settles when the group or this member ends. */
  next(): Promise<IteratorResult<never>> {
    if (this.ended) return Promise.resolve(DONE);
    return new Promise((resolve) => {
      this.resolveNext = resolve;
    });
  }

  /** The group ended: graphql-ws completes this subscription. */
  finish() {
    this.ended = true;
    this.resolveNext?.(DONE);
    this.resolveNext = undefined;
  }

  async return(): Promise<IteratorResult<never>> {
    this.leave();
    return DONE;
  }

  async throw(error?: unknown): Promise<IteratorResult<never>> {
    this.leave();
    throw error;
  }

  private leave() {
    if (!this.group.members.delete(this.member)) return;
    this.finish();
    this.onLeave(this.group);
  }
}

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

  function leaveGroup(group: Group) {
    if (group.members.size > 0) return;
    if (groups.get(group.key) === group) groups.delete(group.key);
    void group.stream.return?.();
  }

  function isShareable(document: DocumentNode): boolean {
    let known = shareable.get(document);
    if (known === undefined) {
      known = selectionIsViewerIndependent(deps.schema, document);
      shareable.set(document, known);
    }
    return known;
  }

  async function pump(key: string, group: Group) {
    try {
      for (;;) {
        const { value: result, done } = await group.stream.next();
        if (done || group.members.size === 0) break;
        broadcast(group, result);
      }
    } catch {
      // The stream failed (e.g. pub/sub gone): members complete below; clients resubscribe.
    } finally {
      if (groups.get(key) === group) groups.delete(key);
      for (const subscription of group.members.values()) subscription.finish();
      group.members.clear();
    }
  }

  function broadcast(group: Group, result: ExecutionResult) {
    // graphql-ws's `next` message, serialized and UTF-8 encoded once; only the leading id differs per
    // member, so each frame is one Buffer of the member's prefix and the shared suffix (a copy, no encoding).
    const suffix = Buffer.from(`,"type":"next","payload":${JSON.stringify(result)}}`);
    const emittedAt = group.context.eventEmittedAt;
    group.context.eventEmittedAt = undefined;
    for (const [member, { prefix }] of group.members) {
      const { socket } = member;
      if (socket.readyState !== socket.OPEN) continue;
      if (socket.bufferedAmount > deps.maxBufferedBytes) {
        metrics.slowConsumersClosed.inc();
        socket.close(SLOW_CONSUMER_CLOSE_CODE, 'Try Again Later: too slow to keep up');
        continue;
      }
      socket.send(Buffer.concat([prefix, suffix]), TEXT_FRAME, onSendError);
    }
    metrics.eventsDelivered.inc(group.members.size);
    if (emittedAt !== undefined) metrics.eventToSendSeconds.observe((Date.now() - emittedAt) / 1000);
  }

  return {
    keyFor(document, operationName, query, variables) {
      if (!isShareable(document)) return undefined;
      return `${operationName ?? ''}\u0000${query}\u0000${JSON.stringify(variables ?? {})}`;
    },
    join(key, member, stream, context) {
      let group = groups.get(key);
      if (group) {
        // Authorized already; the group's stream serves this member, so its own is closed.
        void stream[Symbol.asyncIterator]().return?.();
      } else {
        group = { key, members: new Map(), stream: stream[Symbol.asyncIterator](), context };
        groups.set(key, group);
        void pump(key, group);
      }
      const subscription = new MemberSubscription(group, member, leaveGroup);
      group.members.set(member, subscription);
      return subscription;
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
