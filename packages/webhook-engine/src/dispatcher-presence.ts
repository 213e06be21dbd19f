import type { RedisClient } from '@herald/config/redis';
import type { Logger } from 'pino';

/** A dispatcher's presence lapses this long after its last renewal (a dead one stops counting). */
export const PRESENCE_TTL_MS = 5_000;
/** Each dispatcher renews its presence, and reads how many are live, this often (one MULTI). */
export const PRESENCE_RENEW_MS = 1_000;
/** `start` waits at most this long for the client to connect (its offline queue may be off). */
const CONNECT_WAIT_MS = 5_000;

/**
 * How many dispatchers are live, as Redis last said: the throttles (endpoint rates, organisations'
 * attempts in flight) divide a limit by it while Redis is unreachable. One sorted set,
 * `<prefix>webhooks:dispatchers`: member the consumer name, score when its presence lapses.
 */
export interface DispatcherPresence {
  /** Live dispatchers at the last successful renewal, this one included; 1 before the first. */
  count(): number;
  /** Registers this dispatcher (waiting up to 5 s for Redis to connect); never rejects. */
  start(): Promise<void>;
  /** Stops renewing and removes this dispatcher at once (others' shares grow without waiting). */
  stop(): Promise<void>;
}

export function createDispatcherPresence(options: {
  redis: RedisClient;
  key: string;
  consumerName: string;
  logger: Logger;
}): DispatcherPresence {
  const { redis, key, consumerName } = options;
  let live = 1;
  let timer: NodeJS.Timeout | undefined;

  async function renew(): Promise<void> {
    const at = Date.now();
    try {
      const [, , counted] = (await redis
        .multi()
        .zadd(key, at + PRESENCE_TTL_MS, consumerName)
        .zremrangebyscore(key, '-inf', at)
        .zcard(key)
        .pexpire(key, PRESENCE_TTL_MS * 2)
        .exec()) as Array<[Error | null, unknown]>;
      live = Math.max(1, Number(counted?.[1] ?? 1));
    } catch (error) {
      options.logger.debug({ err: error }, 'renewing the dispatcher presence failed');
    }
  }

  return {
    count: () => live,
    async start() {
      if (redis.status !== 'ready') {
        // Not connected yet: wait a little, so the first throttles ask Redis rather than a local share.
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, CONNECT_WAIT_MS);
          timer.unref();
          redis.once('ready', () => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
      await renew();
      timer = setInterval(() => void renew(), PRESENCE_RENEW_MS);
      timer.unref();
    },
    async stop() {
      clearInterval(timer);
      timer = undefined;
      await redis.zrem(key, consumerName).catch(() => undefined);
    },
  };
}
