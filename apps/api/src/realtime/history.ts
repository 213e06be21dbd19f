import type { HistoryEntry, PostPublishedEventV1 } from '@herald/contracts';

/**
 * Each organisation's subscription history and live channel, behind one interface with two
 * implementations: Redis (cluster mode, `redis-history.ts`) and an in-process ring (one process,
 * `memory-history.ts`).
 *
 * Contract of every implementation:
 * - `append` gives each event the next position of its organisation (1, 2, 3, … per epoch), keeps the
 *   last `size` events for `ttlMs` after the organisation's last event, publishes the entry live, and
 *   does all of that as one atomic step per event. An event id already in the history is not appended
 *   again (its existing entry is returned).
 * - `listen` delivers an organisation's live entries in position order, each once; once its promise
 *   resolves, every later append reaches the listener.
 * - `readAfter` returns the entries after a position (all of them, or the first `limit`), or refuses with
 *   CursorExpiredError when entries after it are gone (trimmed, expired, another epoch) or it lies in
 *   the future. Any other error means the history can't be read right now.
 */
export interface SubscriptionHistory {
  readonly kind: 'memory' | 'redis';
  /** False with `SUBSCRIPTION_HISTORY_SIZE=0`: positions still exist, but nothing can be replayed. */
  readonly enabled: boolean;
  /**
   * Appends events in order.
   * @returns one outcome per event: its entry, or the error that stopped it (then every later event of the
   *   batch fails too, so a caller can retry the suffix in order)
   */
  append(events: readonly PostPublishedEventV1[]): Promise<AppendOutcome[]>;
  /**
   * Starts delivering `orgId`'s live entries to `listener`.
   * @returns once the listener is live, a function that stops it
   */
  listen(orgId: string, listener: (entry: HistoryEntry) => void): Promise<() => void>;
  /**
   * Entries of `orgId` after `position` of `epoch`, oldest first: every one, or the first `limit`
   * (fewer only when the history ends there). Replays read in pages (see replay-reads.ts).
   * @throws CursorExpiredError when they can't all be returned
   */
  readAfter(orgId: string, epoch: string, position: number, limit?: number): Promise<HistoryEntry[]>;
  /**
   * The organisation's current place: its epoch and last position (0 before any event). An
   * organisation without a history gets one (a new epoch at position 0), so the place is a cursor
   * every later event comes after.
   */
  head(orgId: string): Promise<{ epoch: string; position: number }>;
  /**
   * Resolves once the history can be used.
   * @throws Error when it can't be reached within `timeoutMs`
   */
  ready(timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

export type AppendOutcome = { ok: true; entry: HistoryEntry } | { ok: false; error: Error };

export interface HistoryLimits {
  /** Events kept per organisation (`SUBSCRIPTION_HISTORY_SIZE`); 0 turns resuming off. */
  size: number;
  /** How long an organisation's history outlives its last event (`SUBSCRIPTION_HISTORY_TTL`). */
  ttlMs: number;
}
