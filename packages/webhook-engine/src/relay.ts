import { notReady, READY, type Readiness } from '@herald/config';
import type { Database } from '@herald/db';
import { isTracing, recordBatchSpan } from '@herald/telemetry';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { fanOutOutbox } from './lease-protocol.js';
import { createPollLoop, type PollLoop } from './poll-loop.js';
import { toWorkMessages, type WebhookQueue } from './queue/webhook-queue.js';

export interface RelayOptions {
  db: Kysely<Database>;
  queue: WebhookQueue;
  logger: Logger;
  /** Outbox events fanned out per pass (one statement). */
  batchSize: number;
  /** How often the outbox is looked at without a wake-up (the safety net behind LISTEN/NOTIFY). */
  pollIntervalMs: number;
  /** How long a fanned-out delivery stays queued before the due scan hands it out again. */
  queueLeaseMs: number;
  /** Called after a fan-out statement committed, before the XADD (crash tests). */
  onFannedOut?(): void;
  /** Passes woken while events keep coming start at least this far apart; see {@link RELAY_MIN_GAP_MS}. */
  minGapMs?: number;
}

/**
 * A woken relay pass starts at least this long after the previous one (a pass that filled its batch is
 * followed at once): at a steady publish rate the wake-ups of a few milliseconds share one fan-out
 * statement, whose fixed cost (~0.4 ms of PostgreSQL CPU, plus its XADD and flush) otherwise dominates
 * the CPU per delivery (one fan-out per ~4 events at 1,000 events/s). Adds at most this much to the
 * latency of an event that arrives right after a pass.
 */
export const RELAY_MIN_GAP_MS = 10;

export interface Relay extends Pick<PollLoop, 'start' | 'stop' | 'wake'> {
  /** Not ready while its last fan-out pass failed (`outbox relay failing`). */
  readiness(): Readiness;
}

/**
 * Turns outbox events into deliveries and hands them to the stream (lease protocol step 1): one
 * statement per batch creates the deliveries already queued, then one pipelined XADD per endpoint of
 * the batch (an entry names up to 100 deliveries).
 * Woken right after an outbox commit (LISTEN/NOTIFY, or in-process); polls as the safety net.
 */
export function createRelay(options: RelayOptions): Relay {
  const { db, queue, logger, batchSize } = options;
  const loop = createPollLoop(
    'relay',
    async () => {
      const startedAt = isTracing() ? Date.now() : 0;
      const result = await fanOutOutbox(db, { limit: batchSize, queueLeaseMs: options.queueLeaseMs });
      if (result.events === 0) return false;
      // One statement for many events: one span linked to their traces (nothing with tracing off).
      if (startedAt > 0)
        recordBatchSpan('webhook fan-out', startedAt, result.traceparents, {
          'herald.webhook.events': result.events,
          'herald.webhook.deliveries': result.queued.length,
        });
      options.onFannedOut?.();
      // Killed or failing here: the deliveries' q-leases expire and the due scan queues them again.
      await queue.enqueue(toWorkMessages(result.queued));
      logger.debug({ events: result.events, deliveries: result.queued.length }, 'fanned out outbox events');
      return result.events === batchSize;
    },
    { intervalMs: options.pollIntervalMs, logger, minGapMs: options.minGapMs ?? RELAY_MIN_GAP_MS },
  );
  return {
    start: loop.start,
    stop: loop.stop,
    wake: loop.wake,
    readiness: () => (loop.healthy ? READY : notReady('outbox relay failing')),
  };
}
