import { type Database, markPostEventsHistoriedBatch } from '@herald/db';
import { detached } from '@herald/telemetry';
import type { Kysely } from 'kysely';
import type { Logger } from '../logger.js';

/** A mark waits at most this long for others to share its statement. */
export const HISTORY_MARK_DELAY_MS = 1_000;
/** Marks per statement at most; a full batch is written at once. */
export const HISTORY_MARK_BATCH = 500;
/** After a failed statement (database unreachable), the next try waits this long. */
export const HISTORY_MARK_RETRY_MS = 1_000;
/**
 * Marks kept for a retry at most. Past it the oldest are dropped: the relay appends them again after its
 * grace (`HISTORY_ORPHAN_AFTER_MS`) and the history drops the ids it already holds.
 */
export const HISTORY_MARK_BACKLOG_MAX = 20_000;

export interface HistoryMarks {
  /** Records that `eventId` is in the history; written with others a moment later. */
  add(eventId: string): void;
  /** Writes what is waiting now (shutdown); never rejects. */
  flush(): Promise<void>;
  /** Writes what is waiting and stops; later `add`s are dropped (the relay catches them). */
  stop(): Promise<void>;
}

/**
 * `historied_at` marks of the events this pod's publishes appended to the history themselves (those
 * their publish statement did not mark already: with Redis; see `PublishOptions.historyInProcess`). The
 * answer to `publishPost` never waits for them: a mark only tells the history relay not to take the
 * event (a young unmarked event is its publisher's; see `listPendingPostEvents`), so they are written
 * in batches, one UPDATE for every event appended in the last {@link HISTORY_MARK_DELAY_MS}, without a
 * WAL flush. A mark that is lost (crash, database down for long) costs a repeated append the history's
 * event-id dedup absorbs.
 */
export function createHistoryMarks(deps: { db: Kysely<Database>; logger: Logger }): HistoryMarks {
  const { db, logger } = deps;
  let waiting: string[] = [];
  let timer: NodeJS.Timeout | undefined;
  let writing: Promise<void> | undefined;
  let stopped = false;
  let failing = false;

  function schedule(delayMs: number) {
    if (timer || writing || stopped) return;
    timer = setTimeout(() => {
      timer = undefined;
      // Set while a publish runs, but the batch serves many: outside that publish's trace.
      void detached(write);
    }, delayMs);
    timer.unref();
  }

  function write(): Promise<void> {
    if (writing) return writing;
    if (waiting.length === 0) return Promise.resolve();
    const batch = waiting.slice(0, HISTORY_MARK_BATCH);
    waiting = waiting.slice(batch.length);
    writing = markPostEventsHistoriedBatch(db, batch).then(
      () => {
        failing = false;
        writing = undefined;
        if (waiting.length >= HISTORY_MARK_BATCH) void write();
        else if (waiting.length > 0) schedule(HISTORY_MARK_DELAY_MS);
      },
      (error: unknown) => {
        if (!failing) logger.warn({ err: error }, 'history marks: write failed, retrying (the relay may repeat them)');
        failing = true;
        waiting = [...batch, ...waiting].slice(-HISTORY_MARK_BACKLOG_MAX);
        writing = undefined;
        schedule(HISTORY_MARK_RETRY_MS);
      },
    );
    return writing;
  }

  return {
    add(eventId) {
      if (stopped) return;
      waiting.push(eventId);
      if (waiting.length >= HISTORY_MARK_BATCH && !writing) {
        clearTimeout(timer);
        timer = undefined;
        // A full batch serves many publishes: outside the trace of the one that filled it.
        void detached(write);
      } else schedule(HISTORY_MARK_DELAY_MS);
    },
    async flush() {
      clearTimeout(timer);
      timer = undefined;
      // Whatever is being written, then what waits, one batch after another (at least one try each call).
      await writing;
      for (let rounds = 0; waiting.length > 0 && rounds <= HISTORY_MARK_BACKLOG_MAX / HISTORY_MARK_BATCH; rounds++) {
        await write();
        if (failing) break;
      }
    },
    async stop() {
      await this.flush();
      stopped = true;
      clearTimeout(timer);
      timer = undefined;
    },
  };
}
