import { createRedisClient, isCluster, type RedisClient } from '@herald/config/redis';
import type { Logger } from 'pino';

/*
 * Cluster mode's "an outbox event was just committed" signal, through Redis instead of PostgreSQL's
 * NOTIFY. A transaction that sent NOTIFY holds a global lock across its commit's WAL flush, so every
 * publishPost that notified committed one after another (measured: 7,565–9,740 commits/s without,
 * 1,750–2,820 with, 16 connections). The API publishes on `outboxWakeChannel` after its commit; every
 * dispatcher subscribes and wakes its relay. A lost message only delays the fan-out to the relay's
 * next poll: the outbox is the record. Without Redis (embedded and single mode), NOTIFY stays.
 */

/**
 * Wake-ups asked for closer together than this are sent as one PUBLISH. At 1,000 publishes/s every
 * commit used to send one, and every dispatcher read each of them, while one relay pass (a fan-out
 * statement and an XADD) takes longer than this anyway: a wake-up arriving during a pass only makes the
 * relay run once more, which one message does as well as ten. Costs an event committed within this
 * long of the last PUBLISH at most this much latency.
 */
export const OUTBOX_WAKE_MIN_INTERVAL_MS = 2;

/**
 * Sends wake-ups, coalesced: at most one PUBLISH in flight, at most one per `minIntervalMs`, and one
 * more after them for everything asked meanwhile (a wake-up is never dropped, only merged).
 */
export interface OutboxWakePublisher {
  /** Never throws, never waits: the relay's poll is the safety net. */
  wake(): void;
}

export function createOutboxWakePublisher(
  client: RedisClient,
  channel: string,
  onError: (error: unknown) => void = () => {},
  minIntervalMs = OUTBOX_WAKE_MIN_INTERVAL_MS,
): OutboxWakePublisher {
  // Sharded pub/sub on a cluster (the channel's hash tag names one shard), like the history's channels.
  const sharded = isCluster(client);
  /** A PUBLISH in flight, or one scheduled. */
  let busy = false;
  /** Asked for while busy: one more PUBLISH after. */
  let again = false;
  let lastSent = Number.NEGATIVE_INFINITY;
  const send = (): void => {
    busy = true;
    again = false;
    lastSent = performance.now();
    const sent = sharded ? client.spublish(channel, '') : client.publish(channel, '');
    sent.catch(onError).finally(() => {
      busy = false;
      if (again) wake();
    });
  };
  const wake = (): void => {
    if (busy) {
      again = true;
      return;
    }
    const wait = lastSent + minIntervalMs - performance.now();
    if (wait <= 0) {
      send();
      return;
    }
    busy = true;
    setTimeout(send, wait).unref();
  };
  return { wake };
}

/** A publisher on a Redis connection of its own (for callers without one: scripts, the bench). */
export function connectOutboxWakePublisher(
  redisUrl: string,
  channel: string,
): OutboxWakePublisher & { close(): Promise<void> } {
  const client = createRedisClient(redisUrl, { connectionName: 'herald-outbox-wake' });
  const publisher = createOutboxWakePublisher(client, channel);
  return {
    wake: () => publisher.wake(),
    async close() {
      await client.quit().catch(() => client.disconnect());
    },
  };
}

export interface OutboxWakeListenerOptions {
  redisUrl: string;
  channel: string;
  logger: Logger;
  /** Called on every wake-up (and once subscribed, for events committed before). */
  onWake(): void;
}

export interface OutboxWakeListener {
  start(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Subscribes to the wake-up channel on a connection of its own (a subscribed connection runs no other
 * command). It re-subscribes by itself after a reconnect and wakes the relay then, for anything
 * committed while it was away.
 */
export function createOutboxWakeListener(options: OutboxWakeListenerOptions): OutboxWakeListener {
  const { channel, logger, onWake } = options;
  let client: RedisClient | undefined;
  return {
    async start() {
      const subscriber = createRedisClient(
        options.redisUrl,
        { maxRetriesPerRequest: null, autoResubscribe: true, connectionName: 'herald-dispatcher-wake' },
        { shardedSubscribers: true },
      );
      client = subscriber;
      const sharded = isCluster(subscriber);
      subscriber.on('error', (error: Error) => logger.warn({ err: error }, 'outbox wake-up connection error'));
      subscriber.on(sharded ? 'smessage' : 'message', (name: string) => {
        if (name === channel) onWake();
      });
      subscriber.on('ready', () => onWake());
      await (sharded ? subscriber.ssubscribe(channel) : subscriber.subscribe(channel));
      onWake();
    },
    async stop() {
      const current = client;
      client = undefined;
      if (!current) return;
      await (current.status === 'ready' ? current.quit().then(() => {}) : Promise.resolve()).catch(() => {});
      current.disconnect();
    },
  };
}
