import type { HistoryEntry } from '@herald/contracts';
import { CursorExpiredError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { SubscriptionHistory } from './history.js';

/**
 * The history reads of one pod's resuming subscriptions, bounded and shared.
 *
 * A resume storm (a pod drained, its thousand clients resuming elsewhere at once) must not turn into a
 * thousand history reads in flight: Redis would answer them one after the other while every command of
 * the pod, the live publishes included, waits behind them and times out. Here:
 * - at most `concurrency` reads run at a time (`SUBSCRIPTION_REPLAY_CONCURRENCY`); the others wait in
 *   FIFO order, each bounded in size by its caller (one page);
 * - a read is shared by every caller that asks for the same page (organisation, epoch, position, size)
 *   while it waits, runs, or for `reuseMs` after it finished — but only by callers whose live listener
 *   was on before the read started (`since`, from {@link ReplayReads.mark}): a page read earlier could
 *   end at a head older than the first live event that caller saw, and leave a gap. Clients that were
 *   caught up together resume from the same cursor, so a storm costs about one read per page.
 *
 * Hand-written rather than p-limit: the shared reads need to know when each read starts (the `since`
 * rule above), which is the larger part of this file; the queue itself is a dozen lines.
 */
export interface ReplayReads {
  /** A point in this pod's order of reads: call it once the subscription's live listener is on. */
  mark(): number;
  /**
   * Up to `limit` entries of `orgId` after `position` of `epoch`, oldest first (fewer only when the
   * history ends there), from a read started after `since`.
   * @throws CursorExpiredError when the history can't serve them; any other error when it can't be read
   */
  page(orgId: string, epoch: string, position: number, limit: number, since: number): Promise<HistoryEntry[]>;
  /** Reads waiting for their turn (for metrics and tests). */
  readonly waiting: number;
  /** Reads running now, at most `concurrency`. */
  readonly running: number;
}

export interface ReplayReadsOptions {
  /** Reads at a time (`SUBSCRIPTION_REPLAY_CONCURRENCY`). */
  concurrency: number;
  /** How long a finished read keeps serving callers that may use it. @default 1000 */
  reuseMs?: number;
  /** Finished reads kept for reuse at most (oldest dropped first). @default 64 */
  maxReusable?: number;
  logger: Logger;
}

interface Read {
  key: string;
  /** The mark at which the read was sent; undefined while it waits for its turn. */
  startedAt: number | undefined;
  result: Promise<HistoryEntry[]>;
}

export function createReplayReads(history: SubscriptionHistory, options: ReplayReadsOptions): ReplayReads {
  const { concurrency, logger } = options;
  const reuseMs = options.reuseMs ?? 1_000;
  const maxReusable = options.maxReusable ?? 64;
  let clock = 0;
  let running = 0;
  const turns: Array<() => void> = [];
  const reads = new Map<string, Read[]>();
  /** Finished reads still shared, oldest first. */
  const finished: Read[] = [];

  const turn = (): Promise<void> | undefined => {
    if (running < concurrency) {
      running += 1;
      return undefined;
    }
    return new Promise((resolve) => turns.push(resolve));
  };
  const release = () => {
    const next = turns.shift();
    if (next) next();
    else running -= 1;
  };

  const forget = (read: Read) => {
    const same = reads.get(read.key);
    const index = same?.indexOf(read) ?? -1;
    if (!same || index < 0) return;
    same.splice(index, 1);
    if (same.length === 0) reads.delete(read.key);
  };

  async function run(read: Read, orgId: string, epoch: string, position: number, limit: number) {
    const waiting = turn();
    if (waiting) await waiting;
    read.startedAt = ++clock;
    try {
      return await history.readAfter(orgId, epoch, position, limit);
    } catch (error) {
      if (!(error instanceof CursorExpiredError))
        logger.warn({ err: error, orgId }, 'subscription history read failed: resuming subscribers are told to retry');
      throw error;
    } finally {
      release();
    }
  }

  return {
    mark: () => ++clock,
    page(orgId, epoch, position, limit, since) {
      const key = `${orgId}\u0000${epoch}\u0000${position}\u0000${limit}`;
      const usable = reads.get(key)?.find((read) => read.startedAt === undefined || read.startedAt > since);
      if (usable) return usable.result;
      const read: Read = { key, startedAt: undefined, result: Promise.resolve([]) };
      read.result = run(read, orgId, epoch, position, limit);
      const same = reads.get(key);
      if (same) same.push(read);
      else reads.set(key, [read]);
      read.result.then(
        () => {
          finished.push(read);
          if (finished.length > maxReusable) forget(finished.shift() as Read);
          setTimeout(() => {
            const index = finished.indexOf(read);
            if (index >= 0) finished.splice(index, 1);
            forget(read);
          }, reuseMs).unref();
        },
        // A failed read is not shared with later callers: they try again.
        () => forget(read),
      );
      return read.result;
    },
    get waiting() {
      return turns.length;
    },
    get running() {
      return running;
    },
  };
}
