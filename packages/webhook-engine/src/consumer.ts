import type { Logger } from 'pino';
import type { QueueEntry, WebhookQueue } from './queue/webhook-queue.js';

/** Acknowledgements are sent in batches, at least this often. */
const ACK_FLUSH_INTERVAL_MS = 20;
/** …or as soon as this many are waiting. */
const ACK_FLUSH_BATCH = 100;
/** After a failed read, wait this long before the next one. */
const READ_ERROR_BACKOFF_MS = 500;
/** An entry received this many times without being done is poison: it is parked, not tried again. */
export const MAX_ENTRY_RECEIVES = 5;

export interface ConsumerOptions {
  queue: WebhookQueue;
  /** This dispatcher's name in the consumer group; unique per process. */
  consumerName: string;
  /** Entries worked on at once; new ones are read only while fewer are in hand. */
  concurrency: number;
  /**
   * Entries read by some consumer longer ago than this and never acknowledged are taken over. Must
   * exceed the longest time an entry legitimately takes (a delivery attempt's timeout and its database
   * writes), or work still in progress elsewhere would be done twice.
   */
  reclaimIdleMs: number;
  /** How long one read waits for new entries. @default 1000 */
  blockMs?: number;
  /** Most entries read (and claimed, POSTed, recorded) as one batch; several batches run at once. @default 50 */
  batchSize?: number;
  /**
   * Does the work of a batch of entries (read together). Resolving acknowledges them; rejecting leaves
   * them pending, so they are reclaimed and tried again after `reclaimIdleMs`, at most
   * {@link MAX_ENTRY_RECEIVES} times.
   */
  handle(entries: readonly QueueEntry[]): Promise<void>;
  logger: Logger;
}

export interface Consumer {
  start(): void;
  /** Stops reading, lets the entries in hand finish, and sends their acknowledgements. */
  stop(): Promise<void>;
  /** Entries in hand right now. */
  readonly inFlight: number;
}

/**
 * Reads the queue as one member of the consumer group: batched reads sized to the free capacity,
 * entries handled concurrently, acknowledgements batched, and a periodic reclaim of entries that a dead
 * consumer left pending.
 */
export function createConsumer(options: ConsumerOptions): Consumer {
  const { queue, consumerName, concurrency, reclaimIdleMs, logger } = options;
  const blockMs = options.blockMs ?? 1_000;
  const batchSize = options.batchSize ?? 50;
  const held = new Set<string>();
  const handling = new Set<Promise<void>>();
  let acks: string[] = [];
  let running = false;
  let slotFreed: (() => void) | undefined;
  let readLoop: Promise<void> = Promise.resolve();
  let reclaimTimer: NodeJS.Timeout | undefined;
  let ackTimer: NodeJS.Timeout | undefined;
  let reclaiming = false;

  function take(entries: readonly QueueEntry[]): void {
    const fresh = entries.filter((entry) => !held.has(entry.id));
    if (fresh.length === 0) return;
    for (const entry of fresh) held.add(entry.id);
    const work = handleBatch(fresh);
    handling.add(work);
    void work.finally(() => handling.delete(work));
  }

  async function handleBatch(entries: readonly QueueEntry[]): Promise<void> {
    const garbled = entries.filter((entry) => !entry.message);
    const poison = entries.filter((entry) => entry.message && (entry.receives ?? 0) > MAX_ENTRY_RECEIVES);
    const work = entries.filter((entry) => entry.message && (entry.receives ?? 0) <= MAX_ENTRY_RECEIVES);
    try {
      for (const entry of garbled) logger.warn({ entryId: entry.id }, 'dropping a garbled webhook queue entry');
      acks.push(...garbled.map((entry) => entry.id));
      if (poison.length > 0) {
        // The deliveries stay in the database: their leases expire and the due scan hands them out again.
        await queue
          .park(poison)
          .then(() =>
            logger.error(
              { entries: poison.map((entry) => entry.id), receives: MAX_ENTRY_RECEIVES },
              'parked webhook queue entries that kept failing',
            ),
          )
          .catch((error: unknown) => logger.warn({ err: error }, 'parking poison webhook entries failed'));
      }
      if (work.length > 0) {
        await options.handle(work);
        acks.push(...work.map((entry) => entry.id));
      }
      if (acks.length >= ACK_FLUSH_BATCH) void flushAcks();
    } catch (error) {
      logger.error(
        { err: error, entries: work.length },
        'webhook work failed; the entries will be reclaimed and retried',
      );
    } finally {
      for (const entry of entries) held.delete(entry.id);
      slotFreed?.();
    }
  }

  async function flushAcks(): Promise<void> {
    if (acks.length === 0) return;
    const batch = acks;
    acks = [];
    try {
      await queue.ack(batch);
    } catch (error) {
      // Unacknowledged entries are reclaimed and found done (the database says so): harmless.
      logger.warn({ err: error, entries: batch.length }, 'acknowledging webhook entries failed');
    }
  }

  async function waitForSlot(): Promise<void> {
    while (running && held.size >= concurrency) {
      await new Promise<void>((resolve) => {
        slotFreed = resolve;
      });
      slotFreed = undefined;
    }
  }

  async function read(): Promise<void> {
    while (running) {
      await waitForSlot();
      if (!running) break;
      try {
        const entries = await queue.read(consumerName, Math.min(concurrency - held.size, batchSize), blockMs);
        take(entries);
      } catch (error) {
        logger.warn({ err: error }, 'reading the webhook queue failed');
        await new Promise((resolve) => setTimeout(resolve, READ_ERROR_BACKOFF_MS));
      }
    }
  }

  async function reclaim(): Promise<void> {
    if (reclaiming || !running) return;
    reclaiming = true;
    try {
      const room = concurrency - held.size;
      if (room <= 0) return;
      const entries = await queue.reclaim(consumerName, reclaimIdleMs, room);
      if (entries.length > 0) logger.info({ entries: entries.length }, 'reclaimed webhook entries left pending');
      take(entries);
    } catch (error) {
      logger.warn({ err: error }, 'reclaiming webhook entries failed');
    } finally {
      reclaiming = false;
    }
  }

  return {
    start() {
      if (running) return;
      running = true;
      readLoop = read();
      // Look a few times per idle period, so an entry is taken over soon after it qualifies.
      reclaimTimer = setInterval(() => void reclaim(), Math.max(50, Math.floor(reclaimIdleMs / 4)));
      ackTimer = setInterval(() => void flushAcks(), ACK_FLUSH_INTERVAL_MS);
      void reclaim();
    },
    async stop() {
      running = false;
      clearInterval(reclaimTimer);
      queue.interrupt();
      slotFreed?.();
      await readLoop;
      await Promise.allSettled([...handling]);
      clearInterval(ackTimer);
      await flushAcks();
    },
    get inFlight() {
      return held.size;
    },
  };
}
