import type { Database } from '@herald/db';
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
}

export type Relay = Pick<PollLoop, 'start' | 'stop' | 'wake' | 'healthy'>;

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
      const result = await fanOutOutbox(db, { limit: batchSize, queueLeaseMs: options.queueLeaseMs });
      if (result.events === 0) return false;
      options.onFannedOut?.();
      // Killed or failing here: the deliveries' q-leases expire and the due scan queues them again.
      await queue.enqueue(toWorkMessages(result.queued));
      logger.debug({ events: result.events, deliveries: result.queued.length }, 'fanned out outbox events');
      return result.events === batchSize;
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
  };
}
