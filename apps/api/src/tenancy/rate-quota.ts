import type { RedisClient } from '@herald/config/redis';
import { LRUCache } from 'lru-cache';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';

/** A rate quota counts per second; a burst of one second's worth passes at once. */
const WINDOW_SECONDS = 1;
/** Distinct limits kept with their limiters (overrides are few; past this the least recently used goes). */
export const MAX_LIMITERS = 256;
/**
 * With Redis, a pod takes units in batches of a tenth of its share (`limit / pods / 10`, when that is
 * more than one) and spends them locally until its window ends: one round trip per batch instead of one
 * per operation. Units a pod took and did not spend are lost to its tenant for the rest of the window,
 * at most a tenth of the quota per pod.
 */
const BATCHES_PER_SHARE = 10;
/** A caller waits for at most this many batches taken by others before counting locally. */
const MAX_BATCH_ROUNDS = 4;
/** `takeBatch`'s answer when Redis failed. */
const REDIS_FAILED = -1;
/** Subjects with a batch in hand remembered at most (past it the least recently used is dropped). */
export const MAX_BATCHES = 10_000;

export interface RateQuotaOptions {
  /** Cluster mode: the counters live here, shared by every pod; undefined keeps them in this process. */
  redis: RedisClient | undefined;
  /** Prefix of this quota's Redis keys (`herald:tenant:ops`); each key adds `:<subject>`. */
  keyPrefix: string;
  /**
   * How many pods share the quota, as last seen in Redis: while Redis is unreachable this pod lets
   * through `ceil(limit / pods)` a second per subject (its share), never nothing and never everything.
   */
  pods: () => number;
  /** Called when Redis failed a check and the local share answered instead. */
  onRedisError: (error: unknown) => void;
  /** Subjects whose batches are kept (least recently used dropped past it). @default MAX_BATCHES */
  maxBatches?: number;
}

export interface RateQuota {
  /**
   * Takes one unit for `subject` under `limit` per second (0: no limit, nothing counted).
   * @returns 0 when allowed, else the milliseconds until a retry may pass (at least 1)
   */
  consume(subject: string, limit: number): Promise<number>;
  /** Units taken in the current second (cluster-wide when Redis answers, else this pod's). */
  current(subject: string, limit: number): Promise<number>;
}

interface Limiters {
  /** Cluster-wide (Redis); undefined without Redis. */
  shared: RateLimiterRedis | undefined;
  /** The local limiter: the whole quota without Redis, this pod's share while Redis is away. */
  local: RateLimiterMemory;
  localPoints: number;
  /** Units taken from Redis at once (1: one round trip per unit). */
  batch: number;
}

/** Units a pod took from Redis for one subject, spent locally until its window ends. */
interface Batch {
  left: number;
  endsAt: number;
}

/**
 * A per-second quota with rate-limiter-flexible: `RateLimiterRedis` (one Lua `INCRBY`+`PTTL` on a key
 * that expires with its window; a single key per subject, so Redis Cluster routes it like any other)
 * in cluster mode, `RateLimiterMemory` otherwise. A subject over its limit is remembered in memory until
 * its window ends (`inMemoryBlockOnConsumed`), so a storm's refusals cost no Redis round trip.
 *
 * With Redis, a pod takes units in batches (BATCHES_PER_SHARE) when its share is large enough, so a
 * tenant's operations cost one Redis round trip per batch; a batch that crosses the limit grants only
 * the units under it, so the cluster never lets through more than the limit in a window.
 *
 * While Redis fails (down, or not ready: ioredis answers at once with the offline queue off) the check
 * is answered by a local limiter holding this pod's share, so a pod never refuses every tenant nor lets
 * every request through, and a check never throws.
 */
export function createRateQuota(options: RateQuotaOptions): RateQuota {
  const limiters = new LRUCache<number, Limiters>({ max: MAX_LIMITERS });
  const batches = new LRUCache<string, Batch>({ max: options.maxBatches ?? MAX_BATCHES });
  const inFlight = new Map<string, Promise<number>>();

  function limitersFor(limit: number): Limiters {
    const pods = Math.max(1, options.pods());
    const localPoints = options.redis ? Math.max(1, Math.ceil(limit / pods)) : limit;
    let found = limiters.get(limit);
    if (found && found.localPoints === localPoints) return found;
    found = {
      shared: options.redis
        ? (found?.shared ??
          new RateLimiterRedis({
            storeClient: options.redis,
            keyPrefix: options.keyPrefix,
            points: limit,
            duration: WINDOW_SECONDS,
            inMemoryBlockOnConsumed: limit,
            rejectIfRedisNotReady: true,
          }))
        : undefined,
      local: new RateLimiterMemory({ keyPrefix: options.keyPrefix, points: localPoints, duration: WINDOW_SECONDS }),
      localPoints,
      batch: Math.max(1, Math.floor(limit / pods / BATCHES_PER_SHARE)),
    };
    limiters.set(limit, found);
    return found;
  }

  async function consumeLocal(limiter: RateLimiterMemory, subject: string): Promise<number> {
    try {
      await limiter.consume(subject);
      return 0;
    } catch (refusal) {
      return retryAfter(refusal);
    }
  }

  async function consumeShared(shared: RateLimiterRedis, local: RateLimiterMemory, subject: string) {
    try {
      await shared.consume(subject);
      return 0;
    } catch (refusal) {
      if (refusal instanceof RateLimiterRes) return retryAfter(refusal);
      options.onRedisError(refusal);
      return consumeLocal(local, subject);
    }
  }

  /**
   * Takes a batch from Redis and keeps what was granted for the callers.
   * @returns 0 when units were granted, the refusal's wait when none were, or REDIS_FAILED
   */
  async function takeBatch(
    shared: RateLimiterRedis,
    key: string,
    subject: string,
    limit: number,
    batch: number,
  ): Promise<number> {
    let granted: number;
    let msBeforeNext: number;
    try {
      const taken = await shared.consume(subject, batch);
      granted = batch;
      msBeforeNext = taken.msBeforeNext;
    } catch (refusal) {
      if (!(refusal instanceof RateLimiterRes)) {
        options.onRedisError(refusal);
        return REDIS_FAILED;
      }
      // A batch that crossed the limit: the units under it are this pod's (a refusal from the
      // in-memory block has counted nothing: consumedPoints 0).
      granted = refusal.consumedPoints > 0 ? limit - (refusal.consumedPoints - batch) : 0;
      if (granted <= 0) return retryAfter(refusal);
      msBeforeNext = refusal.msBeforeNext;
    }
    batches.set(key, { left: granted, endsAt: Date.now() + msBeforeNext });
    return 0;
  }

  return {
    async consume(subject, limit) {
      if (limit <= 0) return 0;
      const { shared, local, batch } = limitersFor(limit);
      if (!shared) return consumeLocal(local, subject);
      if (batch <= 1) return consumeShared(shared, local, subject);
      const key = `${limit}:${subject}`;
      for (let round = 0; round < MAX_BATCH_ROUNDS; round++) {
        const held = batches.get(key);
        if (held && held.left > 0 && held.endsAt > Date.now()) {
          held.left--;
          return 0;
        }
        // One batch in flight per subject: callers arriving meanwhile wait for it rather than each
        // taking their own (64 callers at a window's start would otherwise take 64 batches).
        let taking = inFlight.get(key);
        if (!taking) {
          taking = takeBatch(shared, key, subject, limit, batch);
          inFlight.set(key, taking);
        }
        const outcome = await taking;
        if (inFlight.get(key) === taking) inFlight.delete(key);
        if (outcome === REDIS_FAILED) return consumeLocal(local, subject);
        if (outcome > 0) return outcome;
      }
      // Others spent every batch before this caller's turn: one unit of its own.
      return consumeShared(shared, local, subject);
    },
    async current(subject, limit) {
      if (limit <= 0) return 0;
      const { shared, local } = limitersFor(limit);
      if (shared) {
        try {
          return (await shared.get(subject))?.consumedPoints ?? 0;
        } catch (error) {
          options.onRedisError(error);
        }
      }
      return (await local.get(subject))?.consumedPoints ?? 0;
    },
  };
}

function retryAfter(refusal: unknown): number {
  if (refusal instanceof RateLimiterRes) return Math.max(1, Math.ceil(refusal.msBeforeNext));
  throw refusal;
}
