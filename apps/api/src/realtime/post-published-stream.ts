import type { HistoryEntry } from '@herald/contracts';
import { CursorExpiredError, HistoryUnavailableError } from '../errors.js';
import { decodeCursor } from './cursor.js';
import type { SubscriptionHistory } from './history.js';
import type { ReplayReads } from './replay-reads.js';

/** One event of a `postPublished` stream, with whether it came from the history (catch-up) or live. */
export interface StreamedEntry {
  entry: HistoryEntry;
  replayed: boolean;
}

/** Where a stream's events come from: the pod's history and its bounded, shared replay reads. */
export interface EventSource {
  history: SubscriptionHistory;
  replay: ReplayReads;
}

export interface StreamOptions {
  /** Entries per history read while replaying. @default {@link REPLAY_PAGE_SIZE} */
  pageSize?: number;
  /** Live entries held while replaying, at most. @default {@link MAX_BUFFERED_LIVE} */
  maxBuffered?: number;
}

/**
 * Entries per history read while replaying: one read is ~80 KB from Redis, well under a millisecond
 * of its time, and a stream holds at most one page it has not delivered yet.
 */
export const REPLAY_PAGE_SIZE = 200;
/**
 * Live entries a replaying stream holds while it catches up. Beyond that the oldest are dropped: they
 * are in the history (an entry is published only once appended), so the replay reads on until it has
 * passed them. A long catch-up under a high publish rate so holds a bounded amount per subscriber.
 */
export const MAX_BUFFERED_LIVE = 1_000;

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Opens an organisation's event stream, resuming after `after` when given: listen live
 * first and hold live entries, replay the history after the cursor page by page as the consumer asks
 * for events, then deliver the held and later live entries, dropping any at or before the last one
 * delivered. No gap (the listener was live before any read it relies on) and no duplicate (positions
 * only go forward).
 *
 * Resolves once the stream is live and the first page is read, so every refusal of the cursor happens
 * before the stream exists. A later page that can't be read ends the stream with the same errors.
 * @throws CursorExpiredError for a malformed, foreign, trimmed or other-epoch cursor
 * @throws HistoryUnavailableError when the history can't be read now (Redis unreachable or too slow)
 */
export async function openPostPublishedStream(
  source: EventSource,
  orgId: string,
  after: string | null | undefined,
  options: StreamOptions = {},
): Promise<AsyncIterableIterator<StreamedEntry>> {
  const { history } = source;
  const pageSize = options.pageSize ?? REPLAY_PAGE_SIZE;
  const maxBuffered = options.maxBuffered ?? MAX_BUFFERED_LIVE;
  const cursor = after == null ? undefined : decodeCursor(after, orgId);
  if (cursor && !history.enabled) throw new CursorExpiredError('resuming is turned off on this server');

  const queue: StreamedEntry[] = [];
  let waiting: ((result: IteratorResult<StreamedEntry>) => void) | undefined;
  let ended = false;
  /** The last entry delivered (or the cursor's place): later entries only. */
  let last = cursor ? { epoch: cursor.epoch, position: cursor.position } : undefined;

  // While replaying: where the history has been read up to, and the live entries held meanwhile.
  let replaying = cursor !== undefined;
  let read = last;
  const held: HistoryEntry[] = [];
  /** The highest position of the cursor's epoch that was dropped from `held`: the replay must pass it. */
  let droppedThrough = 0;
  /** A live entry of another epoch was dropped from `held`: the history was lost during the replay. */
  let droppedOtherEpoch = false;
  /** Only reads started after this mark of the pod's replay reads may serve this stream. */
  let since = 0;

  const accept = (entry: HistoryEntry, replayed: boolean) => {
    if (ended) return;
    if (last && entry.epoch === last.epoch && entry.position <= last.position) return;
    last = { epoch: entry.epoch, position: entry.position };
    const item = { entry, replayed };
    if (waiting) {
      const resolve = waiting;
      waiting = undefined;
      resolve({ value: item, done: false });
    } else queue.push(item);
  };

  const stopListening = await history.listen(orgId, (entry) => {
    if (!replaying) return accept(entry, false);
    held.push(entry);
    if (held.length <= maxBuffered) return;
    const dropped = held.shift() as HistoryEntry;
    if (dropped.epoch === cursor?.epoch) droppedThrough = Math.max(droppedThrough, dropped.position);
    else droppedOtherEpoch = true;
    // Only a read started after this drop is sure to contain the dropped entry: never reuse an older one.
    since = source.replay.mark();
  });
  // Reads started from now on may serve this stream (see replay-reads.ts).
  since = source.replay.mark();

  const end = () => {
    if (ended) return;
    ended = true;
    stopListening();
    queue.length = 0;
    held.length = 0;
    waiting?.({ value: undefined, done: true });
    waiting = undefined;
  };

  /** Reads and queues the next page; once the history is exhausted, goes live. */
  async function readPage() {
    const from = read as { epoch: string; position: number };
    let page: HistoryEntry[];
    try {
      page = await source.replay.page(orgId, from.epoch, from.position, pageSize, since);
    } catch (error) {
      end();
      if (error instanceof CursorExpiredError) throw error;
      throw new HistoryUnavailableError();
    }
    if (ended) return;
    for (const entry of page) accept(entry, true);
    const tail = page.at(-1);
    if (tail) read = { epoch: tail.epoch, position: tail.position };
    // A short page: the history had nothing more when it was read, so everything later reached the
    // listener, unless it was dropped from `held` (then read on past it).
    if (page.length < pageSize && (read?.position ?? 0) >= droppedThrough) {
      if (droppedOtherEpoch) {
        end();
        throw new CursorExpiredError('the history was lost while replaying');
      }
      replaying = false;
      for (const entry of held.splice(0)) accept(entry, false);
    }
  }

  if (replaying) {
    try {
      await readPage();
    } catch (error) {
      end();
      throw error;
    }
  }

  const iterator: AsyncIterableIterator<StreamedEntry> = {
    [Symbol.asyncIterator]() {
      return iterator;
    },
    async next() {
      for (;;) {
        const item = queue.shift();
        if (item) {
          // A replayed entry is at hand at once, so without this a catch-up would execute its events in
          // one run of microtasks, and a thousand catch-ups would hold the event loop for seconds: no
          // socket read, no live event, Redis replies timing out. One event per turn of the loop each.
          if (item.replayed) await yieldToEventLoop();
          if (ended) return { value: undefined, done: true };
          return { value: item, done: false };
        }
        if (ended) return { value: undefined, done: true };
        if (!replaying) {
          return new Promise((resolve) => {
            waiting = resolve;
          });
        }
        // The consumer has taken every replayed entry so far: read the next page (backpressure: a
        // stream holds at most one page its consumer has not taken).
        const before = read?.position;
        await readPage();
        // Nothing new yet (reading on past dropped live entries): let the loop turn before asking again.
        if (replaying && read?.position === before) await yieldToEventLoop();
      }
    },
    async return() {
      end();
      return { value: undefined, done: true };
    },
    async throw(error?: unknown) {
      end();
      throw error;
    },
  };
  return iterator;
}
