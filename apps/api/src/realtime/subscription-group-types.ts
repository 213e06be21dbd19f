import type { ExecutionResult } from 'graphql';
import type { WebSocket } from 'ws';
import type { Context } from '../context.js';
import type { ApiMetrics } from '../metrics.js';
import type { DirectFrames } from './ws-direct-frames.js';

/**
 * The shapes the shared-execution modules pass between them (subscription-groups.ts has the design): a
 * group, the registry of one `createSubscriptionGroups`, a place in history, and what a group needs of
 * each of its members (subscription-group-member.ts). Types only.
 */

/** A place in an organisation's history. */
export interface Position {
  epoch: string;
  position: number;
}

/** What a group needs of a member: its frame head, its socket, what to skip, and how to end it. */
export interface Recipient {
  /** `{"id":<subscription id>`: the only part of a `next` frame that differs per member. */
  readonly head: string;
  readonly headBytes: number;
  readonly socket: WebSocket;
  /** Events at or before this were delivered to the member before it joined. */
  skipThrough: Position | undefined;
  /** The group ended (`error` set: it failed); called by the group, which forgets its members itself. */
  end(error?: Error): void;
}

export interface Group {
  key: string;
  members: Set<Recipient>;
  stream: AsyncIterator<ExecutionResult>;
  /** The context the stream executes with: where the resolver leaves each event's position. */
  context: Context;
  /** The last event broadcast. */
  last: Position | undefined;
}

/** What every member of one `createSubscriptionGroups` shares (one object, not a closure per member). */
export interface Registry {
  groups: Map<string, Group>;
  metrics: ApiMetrics;
  maxBufferedBytes: number;
  onSendError: (error?: Error | null) => void;
  /** Writes each member's frame (ws-direct-frames.ts: straight to the TCP socket when ws allows). */
  frames: DirectFrames;
}
