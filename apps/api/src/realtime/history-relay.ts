import { notReady, READY, type Readiness } from '@herald/config';
import { type Database, listPendingPostEvents, markPostEventsHistoried, withHistoryRelayLock } from '@herald/db';
import { isTracing, recordBatchSpan } from '@herald/telemetry';
import type { Kysely } from 'kysely';
import type { Logger } from '../logger.js';
import type { ApiMetrics } from '../metrics.js';
import type { SubscriptionHistory } from './history.js';
import { toPostPublishedEvent } from './post-event.js';

/** Events moved per pass (one Redis round trip each, pipelined, and one UPDATE). */
export const HISTORY_RELAY_BATCH = 200;
/** Safety-net pass when nobody woke the relay: events another pod committed but did not hand over. */
export const HISTORY_RELAY_IDLE_MS = 1_000;
/** First retry delay after a failed pass (Redis or the database down); doubles up to the maximum. */
export const HISTORY_RELAY_RETRY_MIN_MS = 100;
export const HISTORY_RELAY_RETRY_MAX_MS = 2_000;
/**
 * An event its publisher neither appended nor handed over is taken after this long (the publisher died
 * between its commit and its append or mark). Longer than a direct append can take (the Redis command
 * timeout, 5 s), so the relay does not race live publishers; the history's dedup covers it if it does.
 */
export const HISTORY_ORPHAN_AFTER_MS = 10_000;

export interface HistoryRelay {
  start(): void;
  /** Stops after the pass in progress. */
  stop(): Promise<void>;
  /**
   * Runs a pass now: call after handing an event over (`handPostEventToRelay`).
   * @returns once a pass that started after this call has finished, moved or not (never rejects)
   */
  wake(): Promise<void>;
  /** Not ready while the last pass failed, Redis or the database unreachable (`history relay failing`). */
  readiness(): Readiness;
}

export interface HistoryRelayDeps {
  db: Kysely<Database>;
  history: SubscriptionHistory;
  logger: Logger;
  metrics: ApiMetrics;
  /** @default {@link HISTORY_ORPHAN_AFTER_MS} */
  orphanAfterMs?: number;
}

/**
 * The safety net behind direct appends: moves committed `post.published` outbox events their publishers
 * did not append into the subscription history (which also publishes them live), so that no publish is
 * silently dropped. In the common case the publishing pod appends its own event right after
 * its commit and marks it later (pubsub.ts, history-marks.ts; with an in-process history, its publish
 * statement marked it already, see `PublishOptions.historyInProcess`); the relay takes the events handed to it
 * (`history_handed_at`: the publisher could not reach Redis, or its organisation had a handed event
 * waiting) at once, and events nobody handed or marked after {@link HISTORY_ORPHAN_AFTER_MS} (the
 * publisher died in between). A post committed while Redis is down thus enters the history, in outbox
 * order behind the handed events of its organisation, once Redis is back.
 *
 * A pass holds the schema's history-relay lock (one relay at a time across pods, each waiting its
 * turn), reads the oldest of those events, appends them (deduplicated by event id in the history, so a
 * crash between the append and the mark, or a direct append racing the relay, repeats nothing), and
 * marks the appended prefix. A publisher that handed its event over wakes its pod's relay and waits for
 * that pass, not for a polling interval.
 */
export function createHistoryRelay(deps: HistoryRelayDeps): HistoryRelay {
  const { db, history, logger, metrics } = deps;
  const orphanAfterMs = deps.orphanAfterMs ?? HISTORY_ORPHAN_AFTER_MS;
  let running = false;
  let stopped = true;
  let wanted = false;
  let healthy = true;
  let retryMs = HISTORY_RELAY_RETRY_MIN_MS;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<void> | undefined;
  /** Callers of `wake` waiting for the next pass to finish. */
  let waiters: Array<() => void> = [];

  function schedule(delayMs: number) {
    clearTimeout(timer);
    if (stopped) return;
    timer = setTimeout(run, delayMs);
    timer.unref();
  }

  function run() {
    if (stopped) return;
    if (running) {
      wanted = true;
      return;
    }
    running = true;
    wanted = false;
    const served = waiters;
    waiters = [];
    const release = () => {
      for (const resolve of served) resolve();
    };
    current = pass().then(
      (more) => {
        release();
        healthy = true;
        retryMs = HISTORY_RELAY_RETRY_MIN_MS;
        running = false;
        schedule(more || wanted ? 0 : HISTORY_RELAY_IDLE_MS);
      },
      (error: unknown) => {
        release();
        if (healthy) logger.warn({ err: error }, 'history relay: pass failed, retrying (events stay in the outbox)');
        healthy = false;
        running = false;
        schedule(retryMs);
        retryMs = Math.min(retryMs * 2, HISTORY_RELAY_RETRY_MAX_MS);
      },
    );
  }

  /** @returns true when a full batch was moved (more may be waiting) */
  async function pass(): Promise<boolean> {
    const { moved, error } = await withHistoryRelayLock(db, async (trx) => {
      const startedAt = isTracing() ? Date.now() : 0;
      const pending = await listPendingPostEvents(trx, HISTORY_RELAY_BATCH, orphanAfterMs);
      if (pending.length === 0) return { moved: 0, error: undefined };
      const outcomes = await history.append(
        pending.map(({ eventId, post, traceparent }) => toPostPublishedEvent(post, eventId, traceparent)),
      );
      const appended: string[] = [];
      let failure: Error | undefined;
      for (const [index, outcome] of outcomes.entries()) {
        if (!outcome.ok) {
          failure = outcome.error;
          break;
        }
        appended.push(pending[index]?.eventId as string);
      }
      await markPostEventsHistoried(trx, appended);
      // One pass for many events: one span linked to their traces (nothing with tracing off).
      if (startedAt > 0)
        recordBatchSpan(
          'subscription history relay',
          startedAt,
          pending.map((event) => event.traceparent),
          { 'herald.subscription.events': appended.length },
        );
      return { moved: appended.length, error: failure };
    });
    if (moved > 0) metrics.eventsPublished.inc(moved);
    if (error) throw error;
    return moved === HISTORY_RELAY_BATCH;
  }

  return {
    start() {
      if (!stopped) return;
      stopped = false;
      schedule(0);
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await current?.catch(() => {});
      for (const resolve of waiters.splice(0)) resolve();
    },
    wake() {
      if (stopped) return Promise.resolve();
      const passed = new Promise<void>((resolve) => waiters.push(resolve));
      if (running) wanted = true;
      else {
        clearTimeout(timer);
        run();
      }
      return passed;
    },
    readiness: () => (healthy ? READY : notReady('history relay failing')),
  };
}
