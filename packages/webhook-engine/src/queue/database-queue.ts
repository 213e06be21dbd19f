import { EventEmitter, once } from 'node:events';
import {
  ackWebhookWork,
  claimWebhookWork,
  countUnclaimedWebhookWork,
  type Database,
  enqueueWebhookWork,
} from '@herald/db';
import { type Kysely, sql } from 'kysely';
import { decodeWorkMessage, type QueueEntry, type WebhookQueue } from './webhook-queue.js';

export interface DatabaseQueueOptions {
  db: Kysely<Database>;
}

/**
 * Embedded mode's queue: the `webhook_queue` table, claimed with `for update skip locked` (see
 * `@herald/db`'s webhook-queue.ts). Enqueues made in this process wake a waiting `read` at once; others
 * are seen within `blockMs`. Dead letters are the DEAD deliveries themselves: `deadLetter` has nothing
 * to add. Receive counts are not kept: a poison entry is reclaimed until its delivery's lease protocol
 * settles it.
 */
export function createDatabaseQueue(options: DatabaseQueueOptions): WebhookQueue {
  const { db } = options;
  const signals = new EventEmitter();
  signals.setMaxListeners(0);

  const toEntries = (rows: Array<{ id: string; message: unknown }>): QueueEntry[] =>
    rows.map((row) => ({
      id: row.id,
      message:
        row.message && typeof row.message === 'object'
          ? decodeWorkMessage(row.message as Record<string, string>)
          : undefined,
    }));

  return {
    kind: 'database',
    async init() {},
    async enqueue(messages) {
      await enqueueWebhookWork(db, messages);
      signals.emit('wake');
    },
    async read(_consumer, count, blockMs) {
      const rows = await claimWebhookWork(db, { limit: count });
      if (rows.length > 0) return toEntries(rows);
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(), blockMs);
      try {
        await once(signals, 'wake', { signal: controller.signal });
      } catch {
        // Waited `blockMs` without a wake-up.
      } finally {
        clearTimeout(timer);
      }
      return toEntries(await claimWebhookWork(db, { limit: count }));
    },
    async reclaim(_consumer, minIdleMs, count) {
      return toEntries(await claimWebhookWork(db, { limit: count, minIdleMs }));
    },
    ack: (ids) => ackWebhookWork(db, ids),
    interrupt() {
      signals.emit('wake');
    },
    async deadLetter() {},
    async park(entries) {
      await ackWebhookWork(
        db,
        entries.map((entry) => entry.id),
      );
    },
    lag: () => countUnclaimedWebhookWork(db),
    async ping() {
      await sql`select 1`.execute(db);
    },
    onReset() {},
    async close() {
      signals.emit('wake');
    },
  };
}
