import type { RedisClient } from '@herald/config/redis';
import type { Logger } from '../logger.js';

/**
 * Evens out WebSockets across pods (docs/scaling.md, "Autoscaling pods that hold sockets"). Long-lived
 * sockets don't move when pods are added, so a new pod would stay idle while the old ones stay hot.
 * Every `intervalMs` each pod:
 *
 * 1. writes its open-socket count and the time into one Redis hash (`<prefix>{rebalance}:pods`, field = pod
 *    id; hash-tagged like every Herald key), and drops fields older than `staleMs` (pods that died);
 * 2. reads every live pod's count: the fair share is ⌈total ÷ pods⌉;
 * 3. if it holds more than the fair share × (1 + `tolerance`) and at least `minExcess` over it, closes the excess with 1012 "Service
 *    Restart", at most `maxShedPerSecond` per second, so clients reconnect through the load balancer to
 *    a less loaded pod (and resume from their cursor) rather than all at once.
 *
 * Redis unreachable: the tick is skipped (logged at debug) and nothing is shed; the pod keeps its sockets.
 */

/** How often a pod reports and checks. */
export const REBALANCE_INTERVAL_MS = 1_000;
/** A pod whose report is older than this is considered gone (3 missed intervals). */
export const REBALANCE_STALE_MS = 3 * REBALANCE_INTERVAL_MS;
/**
 * A pod sheds only above fair share × (1 + this). Behind a round-robin load balancer part of what the
 * loaded pods shed comes back to them, so they settle just under this bound and a joining pod gets the
 * rest: with N pods it ends at least (1 − (N − 1) × this) of the fair share (3 pods: 90 %).
 */
export const REBALANCE_TOLERANCE = 0.05;
/**
 * A pod sheds only when it holds at least this many sockets over its fair share: small clusters (tests,
 * a connect storm's transient unevenness) are left alone.
 */
export const REBALANCE_MIN_EXCESS = 50;
/** Sockets one pod closes per second at most, so reconnects don't stampede. */
export const REBALANCE_MAX_SHED_PER_SECOND = 200;

/** The hash of pod reports, built from `HERALD_REDIS_PREFIX`. */
export function rebalanceKey(prefix: string): string {
  return `${prefix}{rebalance}:pods`;
}

export interface SocketRebalancerDeps {
  redis: RedisClient;
  /** `HERALD_REDIS_PREFIX`. */
  prefix: string;
  /** Unique per process (the hash field). */
  podId: string;
  /** Open sockets on this pod right now. */
  openSockets(): number;
  /** Closes up to `count` sockets with 1012; returns how many it closed. */
  shed(count: number): number;
  logger: Logger;
  /** @default REBALANCE_INTERVAL_MS */
  intervalMs?: number;
  /** @default REBALANCE_STALE_MS */
  staleMs?: number;
  /** @default REBALANCE_TOLERANCE */
  tolerance?: number;
  /** @default REBALANCE_MAX_SHED_PER_SECOND */
  maxShedPerSecond?: number;
  /** @default REBALANCE_MIN_EXCESS */
  minExcess?: number;
  /** @default Date.now */
  now?: () => number;
}

export interface SocketRebalancer {
  start(): void;
  /** Stops the timer and removes this pod's report, so the others stop counting it at once. */
  stop(): Promise<void>;
  /** One report-and-shed step (what the timer runs); returns how many sockets were shed. */
  tick(): Promise<number>;
}

export function createSocketRebalancer(deps: SocketRebalancerDeps): SocketRebalancer {
  const intervalMs = deps.intervalMs ?? REBALANCE_INTERVAL_MS;
  const staleMs = deps.staleMs ?? REBALANCE_STALE_MS;
  const tolerance = deps.tolerance ?? REBALANCE_TOLERANCE;
  const perTick = Math.max(
    1,
    Math.floor(((deps.maxShedPerSecond ?? REBALANCE_MAX_SHED_PER_SECOND) * intervalMs) / 1000),
  );
  const now = deps.now ?? Date.now;
  const minExcess = deps.minExcess ?? REBALANCE_MIN_EXCESS;
  const key = rebalanceKey(deps.prefix);
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<number> | undefined;

  async function tick(): Promise<number> {
    const at = now();
    const own = deps.openSockets();
    await deps.redis.hset(key, deps.podId, `${own}:${at}`);
    const reports = await deps.redis.hgetall(key);
    let total = 0;
    let pods = 0;
    const stale: string[] = [];
    for (const [pod, value] of Object.entries(reports)) {
      const [count, reportedAt] = value.split(':').map(Number);
      if (!Number.isFinite(count) || !Number.isFinite(reportedAt) || at - reportedAt! > staleMs) {
        stale.push(pod);
        continue;
      }
      total += count!;
      pods++;
    }
    if (stale.length > 0) await deps.redis.hdel(key, ...stale);
    if (pods <= 1) return 0;
    const fair = Math.ceil(total / pods);
    if (own <= fair * (1 + tolerance) || own - fair < minExcess) return 0;
    const shed = deps.shed(Math.min(own - fair, perTick));
    if (shed > 0) deps.logger.info({ shed, own, fair, pods }, 'shedding sockets to rebalance pods');
    return shed;
  }

  return {
    tick,
    start() {
      timer ??= setInterval(() => {
        if (running) return;
        running = tick()
          .catch((error: Error) => {
            deps.logger.debug({ err: error }, 'socket rebalancing skipped: redis unavailable');
            return 0;
          })
          .finally(() => {
            running = undefined;
          });
      }, intervalMs);
      timer.unref();
    },
    async stop() {
      clearInterval(timer);
      timer = undefined;
      await running;
      await deps.redis.hdel(key, deps.podId).catch(() => 0);
    },
  };
}
