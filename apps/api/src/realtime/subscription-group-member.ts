import type { ExecutionResult } from 'graphql';
import type { WebSocket } from 'ws';
import type { Context } from '../context.js';
import { startGroup } from './subscription-broadcast.js';
import type { Group, Position, Recipient, Registry } from './subscription-group-types.js';

/**
 * The member side of a shared group (subscription-groups.ts has the design): how one subscription joins
 * a group (at once, or once caught up when resuming), waits while the group writes its frames, and
 * leaves. The group's stream and fan-out are in subscription-broadcast.ts.
 */

/**
 * One subscription of a shared group, and the iterator graphql-ws waits on for it. A class with
 * prototype methods rather than closures: tens of thousands of these live at once, one per subscribed
 * socket (bench/results/PROFILE.md). While catching up (resuming), it yields its own stream's results;
 * once in the group it yields nothing and completes (or fails) when the group ends or it leaves.
 */
export class Member implements Recipient, AsyncIterableIterator<ExecutionResult> {
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
