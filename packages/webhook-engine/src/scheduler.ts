import { claimDueDeliveries, type Database, releaseQueuedDeliveries } from '@herald/db';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { createPollLoop, type PollLoop } from './poll-loop.js';
import type { WebhookQueue } from './queue/webhook-queue.js';

export interface SchedulerOptions {
  db: Kysely<Database>;
  queue: WebhookQueue;
  logger: Logger;
  /** Deliveries handed out per pass. */
  batchSize: number;
  /** How often due deliveries are looked for when idle: the precision of retry times. */
  pollIntervalMs: number;
  /** A delivery handed to the queue and not attempted within this long is handed out again. */
  queueLeaseMs: number;
  /** At most this many deliveries per endpoint queued or in flight at once, across all dispatchers. */
  endpointConcurrency: number;
}

export interface Scheduler extends Pick<PollLoop, 'start' | 'stop' | 'wake' | 'healthy'> {
  /** Hands out every queued delivery again, now (the queue lost its entries). */
  requeue(): Promise<void>;
}

/**
 * Turns due deliveries into queue entries. The durable delay structure is the database: a failed
 * attempt sets the delivery's `next_attempt_at`, and this loop (in whichever dispatcher gets there
 * first) hands it to the queue once that time has come. No timer in memory is the source of truth, so
 * retries survive any restart. It also enforces the per-endpoint concurrency cap: an endpoint with
 * `endpointConcurrency` deliveries queued or in flight gets no more until one finishes, so a slow
 * receiver's backlog waits in the database, not in the queue ahead of other receivers.
 */
export function createScheduler(options: SchedulerOptions): Scheduler {
  const { db, queue, logger, batchSize } = options;
  const loop = createPollLoop(
    'scheduler',
    async () => {
      const due = await claimDueDeliveries(db, {
        limit: batchSize,
        leaseMs: options.queueLeaseMs,
        endpointConcurrency: options.endpointConcurrency,
      });
      if (due.length === 0) return false;
      try {
        await queue.enqueue(
          due.map((delivery) => ({
            kind: 'delivery',
            deliveryId: delivery.id,
            endpointId: delivery.endpointId,
            lease: delivery.lease,
          })),
        );
      } catch (error) {
        // Not in the queue: release the leases so the next pass hands them out again.
        await db
          .updateTable('webhook_deliveries')
          .set({ lease_token: null, leased_until: null })
          .where(
            'lease_token',
            'in',
            due.map((delivery) => delivery.lease),
          )
          .execute()
          .catch(() => {});
        throw error;
      }
      return due.length === batchSize;
    },
    { intervalMs: options.pollIntervalMs, logger },
  );
  return {
    start: loop.start,
    stop: loop.stop,
    wake: loop.wake,
    get healthy() {
      return loop.healthy;
    },
    async requeue() {
      const count = await releaseQueuedDeliveries(db);
      if (count > 0) logger.warn({ deliveries: count }, 'queue was reset: handing queued deliveries out again');
      loop.wake();
    },
  };
}
