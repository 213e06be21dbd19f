import { EventEmitter, once } from 'node:events';
import { ackWebhookWork, countUnclaimedWebhookWork, type Database, enqueueWebhookWork } from '@herald/db';
import { type Kysely, sql } from 'kysely';
import { decodeWorkMessage, encodeWorkMessage, type QueueEntry, type WebhookQueue } from './webhook-queue.js';

export interface DatabaseQueueOptions {
  db: Kysely<Database>;
}

/**
 * Embedded mode's queue: the `webhook_queue` table, claimed with `for update skip locked` (see
 * `@herald/db`'s webhook-queue.ts). Enqueues made in this process wake a waiting `read` at once; others
 * are seen within `blockMs`. Dead letters are the DEAD deliveries themselves: `deadLetter` has nothing
 * to add. Each claim counts a receive in the entry's own row (`message.receives`), so a poison entry is
 * parked (dropped: the delivery stays in the database) after a bounded number of receives, as on Redis.
 *
 * One claim per batch of work (on PGlite every statement costs ~0.2–0.5 ms of the API's own
 * CPU): an empty enqueue wakes nobody, and a `read` right after a claim that came back short, with
 * nothing enqueued in this process since that claim began, does not claim again before it has waited
 * (the table had nothing more then; what another process adds is seen within `blockMs`, as before).
 */
export function createDatabaseQueue(options: DatabaseQueueOptions): WebhookQueue {
  const { db } = options;
  const signals = new EventEmitter();
  signals.setMaxListeners(0);
  /** Bumped by every enqueue (and interrupt) in this process: a claim begun before it may have missed it. */
  let generation = 0;
  /** The generation at which a claim last came back short: the table held nothing more then. */
  let drainedAt = -1;
  const wake = () => {
    generation++;
    signals.emit('wake');
  };

  const toEntries = (rows: Array<{ id: string; message: unknown }>): QueueEntry[] =>
    rows.map((row) => {
      const message = row.message && typeof row.message === 'object' ? (row.message as Record<string, unknown>) : {};
      return {
        id: row.id,
        message: row.message ? decodeWorkMessage(message as Record<string, string>) : undefined,
        receives: Number(message.receives ?? 1),
      };
    });
  /**
   * Claims up to `limit` entries, oldest first: unclaimed ones, or with `minIdleMs`, ones claimed longer
   * ago than that (their consumer is presumed dead); each claim counts one receive in the row.
   */
  const claim = async (limit: number, minIdleMs?: number) => {
    const startedAt = generation;
    const claimable =
      minIdleMs === undefined
        ? sql`claimed_at is null`
        : sql`claimed_at < now() - (${minIdleMs}::double precision * interval '1 millisecond')`;
    const { rows } = await sql<{ id: string; message: unknown }>`
      update webhook_queue
      set claimed_at = now(),
        message = jsonb_set(message, '{receives}', to_jsonb(coalesce((message ->> 'receives')::int, 0) + 1))
      where id in (select id from webhook_queue where ${claimable} order by id limit ${limit} for update skip locked)
      returning id, message
    `.execute(db);
    if (minIdleMs === undefined && rows.length < limit && generation === startedAt) drainedAt = startedAt;
    return toEntries(
      rows
        .map((row) => ({ id: String(row.id), message: row.message }))
        .sort((a, b) => Number(BigInt(a.id) - BigInt(b.id))),
    );
  };

  return {
    kind: 'database',
    async init() {},
    async enqueue(messages) {
      if (messages.length === 0) return;
      await enqueueWebhookWork(db, messages.map(encodeWorkMessage));
      wake();
    },
    async read(_consumer, count, blockMs) {
      if (drainedAt !== generation) {
        const entries = await claim(count);
        if (entries.length > 0) return entries;
        // Something was enqueued while that claim ran: it may not have seen it.
        if (drainedAt !== generation) return claim(count);
      }
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(), blockMs);
      try {
        await once(signals, 'wake', { signal: controller.signal });
      } catch {
        // Waited `blockMs` without a wake-up.
      } finally {
        clearTimeout(timer);
      }
      return claim(count);
    },
    async reclaim(_consumer, minIdleMs, count) {
      return claim(count, minIdleMs);
    },
    ack: (ids) => ackWebhookWork(db, ids),
    interrupt() {
      wake();
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
      wake();
    },
  };
}
