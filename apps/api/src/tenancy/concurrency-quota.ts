import type { RedisClient } from '@herald/config/redis';

/**
 * How long a pod's count stays in Redis without being renewed: a pod that dies without releasing what
 * it held stops counting against its tenants this long after its last renewal.
 */
export const POD_LEASE_MS = 30_000;
/** Each pod renews its counts and its presence this often (three renewals per lease). */
export const LEASE_RENEW_INTERVAL_MS = 10_000;

/**
 * A count of things open at once per subject (sockets per user, subscriptions per organisation), held
 * by every pod together and capped across the cluster.
 *
 * Why not rate-limiter-flexible: its limiters count units per window; a count of things open needs
 * each pod's share to disappear when the pod dies without releasing it, which a window cannot say.
 *
 * Design (cluster mode). One Redis hash per subject, `<prefix><kind>:<subject>`; each field is a pod
 * id and its value `<count>:<expires at, ms since epoch>`. A pod is the only writer of its field and
 * its own count is authoritative in its memory:
 * - acquire: the pod raises its count first (so concurrent acquires on one pod never write the same
 *   value), then one script sums the other pods' unexpired fields (dropping expired ones), refuses if
 *   that sum plus the new count is over the cap, else writes the pod's field; on a refusal the count
 *   goes back down. A hash has one key, so Redis Cluster runs the script on the key's shard.
 * - release: the pod lowers its count and writes its field (deleted at zero), without waiting.
 * - every LEASE_RENEW_INTERVAL_MS the pod rewrites every field it holds with a new expiry, and its
 *   presence in `<prefix>pods` (how many pods share a quota while Redis is away).
 * A pod that dies leaves fields that expire after POD_LEASE_MS; a failed write is repaired by the next
 * renewal. While Redis fails, a pod admits up to its share of the cap, `ceil(cap / pods)`, counted
 * locally, and never refuses for the error itself.
 */
export interface ConcurrencyQuota {
  /**
   * Counts one more for `subject` if that keeps it within `cap` (0: no cap, always counted).
   * @returns whether it was admitted; an admitted one must be released exactly once
   */
  acquire(subject: string, cap: number): Promise<boolean>;
  release(subject: string): void;
  /** How many are open for `subject` across the cluster (this pod's alone while Redis is away). */
  count(subject: string): Promise<number>;
  /** Open here, on this pod. */
  localCount(subject: string): number;
  start(): void;
  stop(): Promise<void>;
}

export interface ConcurrencyQuotaOptions {
  redis: RedisClient | undefined;
  /** Prefix of the subjects' hashes, e.g. `herald:tenant:sockets:`. */
  keyPrefix: string;
  /** This pod's field in every hash. */
  podId: string;
  pods: () => number;
  onRedisError: (error: unknown) => void;
  now?: () => number;
}

// KEYS[1] hash; ARGV pod, now, own count, own expiry, cap, key ttl. Returns {admitted, total}.
const ACQUIRE_SCRIPT = `
local now = tonumber(ARGV[2])
local own = tonumber(ARGV[3])
local cap = tonumber(ARGV[5])
local fields = redis.call('HGETALL', KEYS[1])
local others = 0
for i = 1, #fields, 2 do
  local value = fields[i + 1]
  local sep = string.find(value, ':', 1, true)
  local expires = tonumber(string.sub(value, sep + 1))
  if expires < now then
    redis.call('HDEL', KEYS[1], fields[i])
  elseif fields[i] ~= ARGV[1] then
    others = others + tonumber(string.sub(value, 1, sep - 1))
  end
end
if cap > 0 and others + own > cap then
  return {0, others}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. ':' .. ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {1, others + own}
`;

// KEYS[1] hash; ARGV pod, own count, own expiry, key ttl.
const SET_SCRIPT = `
if tonumber(ARGV[2]) == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1
`;

interface ScriptedRedis {
  heraldQuotaAcquire(key: string, ...args: string[]): Promise<[number, number]>;
  heraldQuotaSet(key: string, ...args: string[]): Promise<number>;
}

/** Defines the scripts once per client (ioredis: EVALSHA, loading the script when a node lacks it). */
export function scripted(redis: RedisClient): RedisClient & ScriptedRedis {
  const client = redis as RedisClient & Partial<ScriptedRedis>;
  if (typeof client.heraldQuotaAcquire !== 'function') {
    redis.defineCommand('heraldQuotaAcquire', { numberOfKeys: 1, lua: ACQUIRE_SCRIPT });
    redis.defineCommand('heraldQuotaSet', { numberOfKeys: 1, lua: SET_SCRIPT });
  }
  return client as RedisClient & ScriptedRedis;
}

export function createConcurrencyQuota(options: ConcurrencyQuotaOptions): ConcurrencyQuota {
  const now = options.now ?? Date.now;
  const redis = options.redis ? scripted(options.redis) : undefined;
  const counts = new Map<string, number>();
  /** Subjects whose field must be rewritten at the next renewal (a write failed, or went to zero). */
  const stale = new Set<string>();
  let timer: NodeJS.Timeout | undefined;

  const key = (subject: string) => `${options.keyPrefix}${subject}`;
  const lease = () => String(now() + POD_LEASE_MS);

  function write(subject: string): Promise<unknown> | undefined {
    if (!redis) return undefined;
    const count = counts.get(subject) ?? 0;
    return redis.heraldQuotaSet(key(subject), options.podId, String(count), lease(), String(POD_LEASE_MS * 2)).then(
      () => undefined,
      (error: unknown) => {
        stale.add(subject);
        options.onRedisError(error);
      },
    );
  }

  function lower(subject: string) {
    const count = (counts.get(subject) ?? 1) - 1;
    if (count <= 0) counts.delete(subject);
    else counts.set(subject, count);
  }

  return {
    async acquire(subject, cap) {
      const own = (counts.get(subject) ?? 0) + 1;
      counts.set(subject, own);
      if (!redis) {
        if (cap > 0 && own > cap) {
          lower(subject);
          return false;
        }
        return true;
      }
      try {
        const [admitted] = await redis.heraldQuotaAcquire(
          key(subject),
          options.podId,
          String(now()),
          String(own),
          lease(),
          String(cap),
          String(POD_LEASE_MS * 2),
        );
        if (Number(admitted) === 1) return true;
      } catch (error) {
        options.onRedisError(error);
        stale.add(subject);
        const share = Math.max(1, Math.ceil(cap / Math.max(1, options.pods())));
        if (cap <= 0 || own <= share) return true;
      }
      lower(subject);
      return false;
    },
    release(subject) {
      lower(subject);
      if (!counts.has(subject)) stale.add(subject);
      void write(subject);
    },
    async count(subject) {
      if (redis) {
        try {
          const fields = await redis.hgetall(key(subject));
          const at = now();
          let total = 0;
          for (const value of Object.values(fields)) {
            const [count, expires] = value.split(':').map(Number);
            if ((expires ?? 0) >= at) total += count ?? 0;
          }
          return total;
        } catch (error) {
          options.onRedisError(error);
        }
      }
      return counts.get(subject) ?? 0;
    },
    localCount(subject) {
      return counts.get(subject) ?? 0;
    },
    start() {
      if (!redis || timer) return;
      timer = setInterval(() => {
        const subjects = new Set([...counts.keys(), ...stale]);
        stale.clear();
        for (const subject of subjects) void write(subject);
      }, LEASE_RENEW_INTERVAL_MS);
      timer.unref();
    },
    async stop() {
      clearInterval(timer);
      timer = undefined;
      // Hand back what this pod held, so other pods' tenants get it now rather than after the lease.
      if (redis) {
        for (const subject of counts.keys()) counts.set(subject, 0);
        await Promise.all([...counts.keys()].map((subject) => write(subject)));
      }
      counts.clear();
    },
  };
}
