import type { HistoryEntry } from '@herald/contracts';
import { CursorExpiredError } from '../errors.js';
import { decodeCursor } from './cursor.js';
import type { SubscriptionHistory } from './history.js';

/** One event of a `postPublished` stream, with whether it came from the history (catch-up) or live. */
export interface StreamedEntry {
  entry: HistoryEntry;
  replayed: boolean;
}

/**
 * Opens an organisation's event stream, resuming after `after` when given (SPEC §6.1): listen live
 * first and buffer, read the history after the cursor, deliver that, then the buffered and later
 * live entries, dropping any at or before the last one delivered. No gap (the listener was live
 * before the read) and no duplicate (positions only go forward).
 *
 * Resolves only once the stream is live, and every refusal happens before it exists.
 * @throws CursorExpiredError for a malformed, foreign, trimmed or other-epoch cursor
 */
export async function openPostPublishedStream(
  history: SubscriptionHistory,
  orgId: string,
  after: string | null | undefined,
): Promise<AsyncIterableIterator<StreamedEntry>> {
  const cursor = after == null ? undefined : decodeCursor(after, orgId);
  if (cursor && !history.enabled) throw new CursorExpiredError('resuming is turned off on this server');

  const queue: StreamedEntry[] = [];
  let waiting: ((result: IteratorResult<StreamedEntry>) => void) | undefined;
  let ended = false;
  let replaying = true;
  const buffered: HistoryEntry[] = [];
  let last = cursor ? { epoch: cursor.epoch, position: cursor.position } : undefined;

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
    if (replaying) buffered.push(entry);
    else accept(entry, false);
  });
  try {
    if (cursor) for (const entry of await history.readAfter(orgId, cursor.epoch, cursor.position)) accept(entry, true);
  } catch (error) {
    stopListening();
    throw error;
  }
  replaying = false;
  for (const entry of buffered.splice(0)) accept(entry, false);

  const end = () => {
    if (ended) return;
    ended = true;
    stopListening();
    queue.length = 0;
    waiting?.({ value: undefined, done: true });
    waiting = undefined;
  };
  const iterator: AsyncIterableIterator<StreamedEntry> = {
    [Symbol.asyncIterator]() {
      return iterator;
    },
    next() {
      const item = queue.shift();
      if (item) return Promise.resolve({ value: item, done: false });
      if (ended) return Promise.resolve({ value: undefined, done: true });
      return new Promise((resolve) => {
        waiting = resolve;
      });
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
