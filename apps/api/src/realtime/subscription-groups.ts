import type { DocumentNode, ExecutionResult, GraphQLSchema } from 'graphql';
import { getNamedType, isObjectType, TypeInfo, visit, visitWithTypeInfo } from 'graphql';
import type { WebSocket } from 'ws';
import type { Context } from '../context.js';
import { SubscriptionInterruptedError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { ApiMetrics } from '../metrics.js';
import { endFanOutSpan, startFanOutSpan } from './fan-out-span.js';
import { createDirectFrames, type DirectFrames } from './ws-direct-frames.js';

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

interface Group {
  key: string;
  members: Set<Member>;
  stream: AsyncIterator<ExecutionResult>;
  /** The context the stream executes with: where the resolver leaves each event's position. */
  context: Context;
  /** The last event broadcast. */
  last: Position | undefined;
}

/** What every member of one `createSubscriptionGroups` shares (one object, not a closure per member). */
interface Registry {
  groups: Map<string, Group>;
  metrics: ApiMetrics;
  maxBufferedBytes: number;
  onSendError: (error?: Error | null) => void;
  /** Writes each member's frame (ws-direct-frames.ts: straight to the TCP socket when ws allows). */
  frames: DirectFrames;
}

/** One function for every frame (called only on a failed write): no closure per send. */
function countSendError(this: ApiMetrics, error?: Error | null) {
  if (error) this.deliveryErrors.inc({ reason: 'send_failed' });
}

/**
 * One subscription of a shared group, and the iterator graphql-ws waits on for it. A class with
 * prototype methods rather than closures: tens of thousands of these live at once, one per subscribed
 * socket (bench/results/PROFILE.md). While catching up (resuming), it yields its own stream's results;
 * once in the group it yields nothing and completes (or fails) when the group ends or it leaves.
 */
class Member implements AsyncIterableIterator<ExecutionResult> {
  /** `{"id":<subscription id>`: the only part of a `next` frame that differs per member. */
  readonly head: string;
  readonly headBytes: number;
  /** The group it belongs to, once it joined; undefined again once it left. */
  group: Group | undefined = undefined;
  /** Events at or before this were delivered to the member before it joined. */
  skipThrough: Position | undefined = undefined;
  /** Set once it entered a group: `next()` then waits for the end. */
  private joined = false;
  /**
   * What `next()` returns once in the group, made when graphql-ws first waits (it always does, at once),
   * and how to settle it; `outcome` keeps an end that came before anyone waited (an error: a failure).
   */
  private finished: Promise<IteratorResult<never>> | undefined = undefined;
  private settle: ((value: IteratorResult<never> | Promise<never>) => void) | undefined = undefined;
  private outcome: Error | true | undefined = undefined;
  /** Called once when the subscription ends, for any reason; undefined once called. */
  private onEnd: (() => void) | undefined;
  /** While catching up: its own stream, its context, and the last event it delivered. */
  private own: AsyncIterator<ExecutionResult> | undefined;
  private context: Context | undefined;
  private lastYielded: Position | undefined = undefined;
  private lastLive = false;

  constructor(
    private readonly registry: Registry,
    private readonly key: string,
    readonly socket: WebSocket,
    id: string,
    own: AsyncIterator<ExecutionResult>,
    context: Context,
    onEnd: (() => void) | undefined,
  ) {
    this.head = `{"id":${JSON.stringify(id)}`;
    this.headBytes = Buffer.byteLength(this.head);
    this.own = own;
    this.context = context;
    this.onEnd = onEnd;
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  /** Joins the group at once (not resuming): hands over its own stream when the group is new. */
  joinNow() {
    const own = this.own as AsyncIterator<ExecutionResult>;
    const existing = this.registry.groups.get(this.key);
    // Authorized already; an existing group's stream serves this member, so its own is closed.
    if (existing) void own.return?.();
    this.enter(existing ?? startGroup(this.registry, this.key, own, this.context as Context), undefined);
    // A member that is not catching up never reads its own context again (the group runs on its first
    // member's): drop it, or it would keep the context and its auth caches per socket.
    this.own = undefined;
    this.context = undefined;
  }

  /** A resuming member joins once its own stream delivered what the group last broadcast. */
  private tryJoin(): boolean {
    const own = this.own;
    const lastYielded = this.lastYielded;
    // Not before its own stream is live: replayed events were never the group's to broadcast.
    if (!own || !lastYielded || !this.lastLive) return false;
    const group = this.registry.groups.get(this.key);
    if (group) {
      const last = group.last;
      if (last && (last.epoch !== lastYielded.epoch || last.position > lastYielded.position)) return false;
      void own.return?.();
      this.enter(group, lastYielded);
    } else {
      this.enter(startGroup(this.registry, this.key, own, this.context as Context, lastYielded), undefined);
    }
    this.own = undefined;
    this.context = undefined;
    return true;
  }

  private enter(group: Group, skipThrough: Position | undefined) {
    this.group = group;
    this.skipThrough = skipThrough;
    this.joined = true;
    group.members.add(this);
  }

  /** The group ended (`error` set: it failed); called by the group, which forgets its members itself. */
  end(error?: Error) {
    this.group = undefined;
    this.ended();
    const settle = this.settle;
    this.settle = undefined;
    if (settle) settle(error ? Promise.reject(error) : { done: true, value: undefined });
    else if (this.outcome === undefined) this.outcome = error ?? true;
  }

  /** Reports the end once (the caller's active-subscription count). */
  private ended() {
    const onEnd = this.onEnd;
    this.onEnd = undefined;
    onEnd?.();
  }

  /**
   * What graphql-ws waits on while the member is in the group. Made on demand rather than at joining:
   * a promise made earlier would need a handler of its own (no one may be waiting yet when it fails).
   */
  private waitForEnd(): Promise<IteratorResult<never>> {
    if (this.finished) return this.finished;
    const outcome = this.outcome;
    if (outcome === true) this.finished = Promise.resolve({ done: true, value: undefined });
    else if (outcome) this.finished = Promise.reject(outcome);
    else
      this.finished = new Promise<IteratorResult<never>>((resolve) => {
        this.settle = resolve;
      });
    return this.finished;
  }

  /** Leaves the group (client `complete`, socket closed); the group's stream stops with its last member. */
  private leave() {
    const group = this.group;
    if (!group) return;
    group.members.delete(this);
    this.end();
    if (group.members.size === 0) {
      const { groups, metrics } = this.registry;
      if (groups.get(group.key) === group) groups.delete(group.key);
      metrics.subscriptionGroups.set(groups.size);
      void group.stream.return?.();
    }
  }

  next(): Promise<IteratorResult<ExecutionResult>> {
    if (this.joined || this.tryJoin()) return this.waitForEnd();
    return this.nextOwn();
  }

  private async nextOwn(): Promise<IteratorResult<ExecutionResult>> {
    let result: IteratorResult<ExecutionResult>;
    try {
      result = await (this.own as AsyncIterator<ExecutionResult>).next();
    } catch (error) {
      this.ended();
      throw error;
    }
    if (result.done) this.ended();
    const event = this.context?.event;
    if (!result.done && event) {
      this.lastYielded = { epoch: event.epoch, position: event.position };
      this.lastLive = !event.replayed;
    }
    return result;
  }

  async return(): Promise<IteratorResult<ExecutionResult>> {
    this.leave();
    this.ended();
    const own = this.own;
    this.own = undefined;
    this.context = undefined;
    await own?.return?.();
    return { done: true, value: undefined };
  }

  async throw(error?: unknown): Promise<IteratorResult<ExecutionResult>> {
    await this.return();
    throw error;
  }
}

/** Starts a group on `stream`, executing with `context` (its first member's). */
function startGroup(
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
