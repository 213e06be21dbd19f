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

/** Sends wake-ups, coalesced: at most one PUBLISH in flight, and one more after it if asked meanwhile. */
export interface OutboxWakePublisher {
  /** Never throws, never waits: the relay's poll is the safety net. */
  wake(): void;
}

export function createOutboxWakePublisher(
  client: RedisClient,
  channel: string,
  onError: (error: unknown) => void = () => {},
): OutboxWakePublisher {
  // Sharded pub/sub on a cluster (the channel's hash tag names one shard), like the history's channels.
  const sharded = isCluster(client);
  let sending = false;
  let again = false;
  const send = (): void => {
    sending = true;
    again = false;
    const sent = sharded ? client.spublish(channel, '') : client.publish(channel, '');
    sent.catch(onError).finally(() => {
      sending = false;
      if (again) send();
    });
  };
  return {
    wake() {
      if (sending) again = true;
      else send();
    },
  };
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
