/**
 * The cluster-mode queue: one Redis stream read through one consumer group by every dispatcher.
 *
 * - Producers (the outbox relay and the scheduler, in any dispatcher) XADD entries to the work stream,
 *   trimmed approximately to {@link MAX_STREAM_LENGTH}: entries are tiny, and the database can rebuild
 *   anything trimmed or lost (see below). Acknowledged entries are dropped soon after (at most every
 *   {@link TRIM_INTERVAL_MS}, by whichever dispatcher acknowledges): the stream holds the backlog, not
 *   the last {@link MAX_STREAM_LENGTH} entries (about 30 MB of Redis memory at 300 bytes an entry).
 * - Each dispatcher reads with XREADGROUP under its own consumer name, so an entry goes to exactly one
 *   of them and sits in the group's pending-entries list (PEL) until XACKed after the work is done.
 * - A dispatcher that dies leaves its entries pending. Every dispatcher periodically looks at the
 *   pending entries idle longer than the reclaim time (XPENDING IDLE, which also says how often each
 *   was delivered) and XCLAIMs them; an entry received too often (poison) is parked instead.
 * - If Redis loses the stream or the group (a restart without persistence, a FLUSHALL, a deleted key),
 *   XREADGROUP/XAUTOCLAIM answer NOGROUP. The queue then recreates both (reading the stream from its
 *   start) and fires `onReset`, on which the dispatcher hands out again whatever the database says is
 *   queued. Nothing hangs, nothing is lost.
 * - Dead letters are also written to a second stream, an alerting feed (the database is their record);
 *   parked poison entries to a third.
 * - Every command touches one key (a pipeline only ever XADDs to the work stream), so the queue runs
 *   unchanged on Redis Cluster (`redis+cluster://`) as on one server or behind Sentinel.
 */
import { createRedisClient } from '@herald/config/redis';
import type { WebhookRedisKeys } from '@herald/contracts';
import type { Logger } from 'pino';
import {
  decodeWorkMessage,
  encodeWorkMessage,
  type QueueEntry,
  type WebhookQueue,
  type WorkMessage,
} from './webhook-queue.js';

/** The work stream is trimmed to roughly this many entries (acknowledged ones are never needed again). */
export const MAX_STREAM_LENGTH = 100_000;
/** The dead-letter stream keeps roughly this many entries. */
export const MAX_DEAD_LETTER_STREAM_LENGTH = 100_000;
/** Acknowledged entries are trimmed from the work stream at most this often per dispatcher. */
export const TRIM_INTERVAL_MS = 1_000;
/** Consumers with nothing pending and idle this long are removed from the group (dead dispatchers). */
const STALE_CONSUMER_IDLE_MS = 24 * 3_600_000;

export interface RedisStreamQueueOptions {
  /**
   * `REDIS_URL`: `redis://`, `rediss://`, `redis+sentinel://` or `redis+cluster://` (`@herald/config`). The
   * queue opens two clients (one for blocking reads).
   */
  redisUrl: string;
  keys: WebhookRedisKeys;
  logger: Logger;
}

type StreamEntry = [id: string, fields: string[]];

export function createRedisStreamQueue(options: RedisStreamQueueOptions): WebhookQueue {
  const { keys, logger } = options;
  const { workStream, deadLetterStream, parkedStream, consumerGroup } = keys;
  const commands = createRedisClient(options.redisUrl, { lazyConnect: false, enableAutoPipelining: true });
  // XREADGROUP BLOCK holds its connection; it gets its own so other commands never wait behind it.
  const blocking = commands.duplicate();
  for (const client of [commands, blocking]) {
    client.on('error', (error) => logger.warn({ err: error }, 'redis connection error'));
  }
  const resetListeners: Array<() => void> = [];
  let lastPrune = 0;
  let lastTrim = 0;
  let trimming = false;

  async function createGroup(): Promise<boolean> {
    try {
      await commands.xgroup('CREATE', workStream, consumerGroup, '0', 'MKSTREAM');
      return true;
    } catch (error) {
      if (error instanceof Error && error.message.startsWith('BUSYGROUP')) return false;
      throw error;
    }
  }

  function reset(): void {
    for (const listener of resetListeners) listener();
  }

  /** NOGROUP: the stream or the group is gone. Recreate them and tell the dispatcher to re-send. */
  async function recover(error: unknown): Promise<boolean> {
    if (!(error instanceof Error) || !error.message.startsWith('NOGROUP')) return false;
    const created = await createGroup();
    logger.warn({ stream: workStream, group: consumerGroup, created }, 'webhook stream or group was lost; recreated');
    reset();
    return true;
  }

  /**
   * Drops the work stream's entries that every dispatcher is done with: those before both the oldest
   * pending entry and the last entry handed to the group (entries after it are not read yet). An entry
   * that becomes pending meanwhile has a later id than either, so it is kept.
   * @returns how many entries were dropped
   */
  async function trimAcknowledged(): Promise<number> {
    const groups = (await commands.xinfo('GROUPS', workStream)) as unknown[][];
    const group = groups.map((raw) => pairs(raw)).find((info) => info.name === consumerGroup);
    let threshold = group?.['last-delivered-id'];
    if (!threshold || threshold === '0-0') return 0;
    const [pending, oldest] = (await commands.xpending(workStream, consumerGroup)) as [number, string | null];
    if (Number(pending) > 0 && oldest && compareStreamIds(oldest, threshold) < 0) threshold = oldest;
    return Number(await commands.xtrim(workStream, 'MINID', threshold));
  }

  function toEntries(entries: StreamEntry[]): QueueEntry[] {
    return entries.map(([id, fields]) => ({ id, message: decodeWorkMessage(pairs(fields)) }));
  }

  async function pruneStaleConsumers(): Promise<void> {
    if (Date.now() - lastPrune < STALE_CONSUMER_IDLE_MS / 24) return;
    lastPrune = Date.now();
    const consumers = (await commands.xinfo('CONSUMERS', workStream, consumerGroup)) as unknown[][];
    for (const raw of consumers) {
      const info = pairs(raw as string[]);
      if (Number(info.pending) === 0 && Number(info.idle) > STALE_CONSUMER_IDLE_MS && info.name) {
        await commands.xgroup('DELCONSUMER', workStream, consumerGroup, info.name);
      }
    }
  }

  return {
    kind: 'redis',
    async init() {
      // Creating the group means there was none: a first start, or a Redis that lost it while no
      // dispatcher was running. Either way, whatever the database says is not done goes out again.
      if (await createGroup()) {
        logger.info({ stream: workStream, group: consumerGroup }, 'created the webhook stream consumer group');
        reset();
      }
    },
    async enqueue(messages: readonly WorkMessage[]) {
      if (messages.length === 0) return;
      const pipeline = commands.pipeline();
      for (const message of messages) {
        pipeline.xadd(
          workStream,
          'MAXLEN',
          '~',
          MAX_STREAM_LENGTH,
          '*',
          ...Object.entries(encodeWorkMessage(message)).flat(),
        );
      }
      const results = (await pipeline.exec()) ?? [];
      const failed = results.find(([error]) => error);
      if (failed?.[0]) throw failed[0];
    },
    async read(consumer, count, blockMs) {
      try {
        const result = (await blocking.xreadgroup(
          'GROUP',
          consumerGroup,
          consumer,
          'COUNT',
          count,
          'BLOCK',
          blockMs,
          'STREAMS',
          workStream,
          '>',
        )) as Array<[string, StreamEntry[]]> | null;
        return result ? toEntries(result[0]?.[1] ?? []) : [];
      } catch (error) {
        if (await recover(error)) return [];
        throw error;
      }
    },
    async reclaim(consumer, minIdleMs, count) {
      try {
        const pending = (await commands.xpending(
          workStream,
          consumerGroup,
          'IDLE',
          minIdleMs,
          '-',
          '+',
          count,
        )) as Array<[id: string, owner: string, idleMs: number, receives: number]>;
        await pruneStaleConsumers().catch((error) => logger.debug({ err: error }, 'pruning stale consumers failed'));
        if (pending.length === 0) return [];
        const receives = new Map(pending.map(([id, , , times]) => [id, Number(times)]));
        // XCLAIM re-checks the idle time, so two dispatchers never both take an entry.
        const claimed = (await commands.xclaim(
          workStream,
          consumerGroup,
          consumer,
          minIdleMs,
          ...pending.map(([id]) => id),
        )) as StreamEntry[];
        // Entries trimmed from the stream come back without fields: nothing left to do for them.
        const trimmed = claimed.filter((entry) => !Array.isArray(entry?.[1])).map((entry) => entry?.[0]);
        if (trimmed.length > 0) await commands.xack(workStream, consumerGroup, ...(trimmed as string[]));
        return toEntries(claimed.filter((entry) => Array.isArray(entry?.[1]))).map((entry) => ({
          ...entry,
          receives: (receives.get(entry.id) ?? 0) + 1,
        }));
      } catch (error) {
        if (await recover(error)) return [];
        throw error;
      }
    },
    async park(entries) {
      if (entries.length === 0) return;
      const pipeline = commands.pipeline();
      for (const entry of entries) {
        pipeline.xadd(
          parkedStream,
          'MAXLEN',
          '~',
          MAX_DEAD_LETTER_STREAM_LENGTH,
          '*',
          'entryId',
          entry.id,
          'receives',
          String(entry.receives ?? 0),
          ...Object.entries(entry.message ?? {}).flat(),
        );
      }
      const results = (await pipeline.exec()) ?? [];
      const failed = results.find(([error]) => error);
      if (failed?.[0]) throw failed[0];
      await commands.xack(workStream, consumerGroup, ...entries.map((entry) => entry.id));
    },
    async ack(ids) {
      if (ids.length === 0) return;
      await commands.xack(workStream, consumerGroup, ...ids);
      if (trimming || Date.now() - lastTrim < TRIM_INTERVAL_MS) return;
      trimming = true;
      lastTrim = Date.now();
      trimAcknowledged()
        .catch((error: unknown) => logger.debug({ err: error }, 'trimming the webhook stream failed'))
        .finally(() => {
          trimming = false;
        });
    },
    interrupt() {
      // Nothing to do: a read blocks for at most `blockMs`, and whatever it returns is still processed
      // (cutting the connection could lose a reply, leaving entries pending until reclaimed).
    },
    async deadLetter(letter) {
      await commands.xadd(
        deadLetterStream,
        'MAXLEN',
        '~',
        MAX_DEAD_LETTER_STREAM_LENGTH,
        '*',
        ...Object.entries(letter).flatMap(([field, value]) => [field, value == null ? '' : String(value)]),
      );
    },
    async lag() {
      try {
        const groups = (await commands.xinfo('GROUPS', workStream)) as unknown[][];
        for (const raw of groups) {
          const info = pairs(raw as string[]);
          if (info.name === consumerGroup) return Number(info.lag ?? 0) || 0;
        }
        return 0;
      } catch {
        return 0;
      }
    },
    async ping() {
      // A command sent while the connection is down waits in ioredis' offline queue until the client
      // gives up on it (10 s and more): the readiness probe must hear "unreachable" now.
      if (commands.status !== 'ready') throw new Error(`Redis connection is ${commands.status}`);
      await commands.ping();
    },
    onReset(listener) {
      resetListeners.push(listener);
    },
    async close() {
      blocking.disconnect();
      // A QUIT sent while Redis is away would wait in the offline queue: only a connected client says goodbye.
      if (commands.status === 'ready') await commands.quit().catch(() => commands.disconnect());
      else commands.disconnect();
    },
  };
}

/** `[k1, v1, k2, v2, …]` → `{ k1: v1, … }`. */
/** Orders two stream ids (`<ms>-<seq>`). */
export function compareStreamIds(a: string, b: string): number {
  const [aMs = 0n, aSeq = 0n] = a.split('-').map(BigInt);
  const [bMs = 0n, bSeq = 0n] = b.split('-').map(BigInt);
  if (aMs !== bMs) return aMs < bMs ? -1 : 1;
  return aSeq === bSeq ? 0 : aSeq < bSeq ? -1 : 1;
}

function pairs(list: readonly unknown[]): Record<string, string> {
  const record: Record<string, string> = {};
  for (let i = 0; i + 1 < list.length; i += 2) record[String(list[i])] = String(list[i + 1]);
  return record;
}
