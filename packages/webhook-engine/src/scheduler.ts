import { notReady, READY, type Readiness } from '@herald/config';
import type { Database } from '@herald/db';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { streamMissedDeadLetters } from './dead-letters.js';
import { queueDueDeliveries, releaseQueuedDeliveries } from './lease-protocol.js';
import { createPollLoop, type PollLoop } from './poll-loop.js';
import { toWorkMessages, type WebhookQueue } from './queue/webhook-queue.js';

/** How often DEAD deliveries missing from the dead-letter stream are looked for. */
const DEAD_LETTER_CATCH_UP_INTERVAL_MS = 5_000;

export interface SchedulerOptions {
  db: Kysely<Database>;
  queue: WebhookQueue;
  logger: Logger;
  /** Deliveries handed out per pass. */
  batchSize: number;
  /** How often due deliveries are looked for: the precision of retry times. */
  pollIntervalMs: number;
  /** A delivery handed to the queue and not claimed within this long is handed out again. */
  queueLeaseMs: number;
}

export interface Scheduler extends Pick<PollLoop, 'start' | 'stop' | 'wake'> {
  /** Not ready while its last pass failed (`scheduler failing`). */
  readiness(): Readiness;
  /** Hands out every queued delivery again, now (the queue lost its entries). */
  requeue(): Promise<void>;
}

/**
 * The durable timer (lease protocol step 2): due deliveries nobody holds (retries, replays,
 * deliveries released over the cap, abandoned leases) are queued again through the index on
 * `next_attempt_at` with a LIMIT. No timer in memory is the source of truth, so retries survive any
 * restart. Also writes dead letters the stream missed.
 */
export function createScheduler(options: SchedulerOptions): Scheduler {
  const { db, queue, logger, batchSize } = options;
  let lastCatchUp = 0;
  const loop = createPollLoop(
    'scheduler',
    async () => {
      if (Date.now() - lastCatchUp > DEAD_LETTER_CATCH_UP_INTERVAL_MS) {
        lastCatchUp = Date.now();
        await streamMissedDeadLetters(db, queue).catch((error: unknown) =>
          logger.warn({ err: error }, 'writing missed dead letters to the stream failed'),
        );
      }
      const due = await queueDueDeliveries(db, { limit: batchSize, queueLeaseMs: options.queueLeaseMs });
      if (due.length === 0) return false;
      // Killed or failing here: the q-leases expire and a later pass queues them again.
      await queue.enqueue(toWorkMessages(due));
      return due.length === batchSize;
    },
    { intervalMs: options.pollIntervalMs, logger },
  );
  return {
    start: loop.start,
    stop: loop.stop,
    wake: loop.wake,
    readiness: () => (loop.healthy ? READY : notReady('scheduler failing')),
    async requeue() {
      const count = await releaseQueuedDeliveries(db);
      if (count > 0) logger.warn({ deliveries: count }, 'queue was reset: handing queued deliveries out again');
      loop.wake();
    },
  };
}
