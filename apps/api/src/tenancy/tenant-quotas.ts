import { isMemberOf, type Viewer } from '@herald/auth';
import type { RedisClient } from '@herald/config/redis';
import type { Database } from '@herald/db';
import type { Kysely } from 'kysely';
import { RateLimitedError, SubscriptionLimitExceededError } from '../errors.js';
import type { Logger } from '../logger.js';
import { createConcurrencyQuota, LEASE_RENEW_INTERVAL_MS, POD_LEASE_MS } from './concurrency-quota.js';
import { createOperationTurns, type OperationTurns } from './operation-turns.js';
import { createOrganizationLimitsCache, type OrganizationLimitsCache } from './organization-limits-cache.js';
import { QUOTAS, type Quota, type TenantLimits } from './quotas.js';
import { createRateQuota } from './rate-quota.js';

/** Refusals counted here are added to the cluster's counts this often (cluster mode). */
const THROTTLED_FLUSH_INTERVAL_MS = 2_000;
/** An organisation's refusal counts are forgotten this long after its last refusal. */
const THROTTLED_TTL_S = 24 * 3_600;
/** Organisations whose refusals this pod holds before a flush; past it further ones wait for the next. */
const MAX_THROTTLED_ORGS = 10_000;
/** A token's first organisations that count its sockets and decide its socket cap (tokens list a few). */
const MAX_ORGS_PER_SOCKET = 20;
/** A Redis failure is logged at most this often (a storm during an outage would log every check). */
const REDIS_ERROR_LOG_INTERVAL_MS = 10_000;

/** What `organizationUsage` reports for one organisation. */
export interface OrganizationUsage {
  orgId: string;
  limits: TenantLimits;
  /** Operations counted against it in the current second. */
  operationsPerSecond: number;
  /** `publishPost` counted against it in the current second. */
  publishesPerSecond: number;
  /** Sockets open by tokens that list it. */
  sockets: number;
  /** Subscriptions active on it. */
  subscriptions: number;
  /** Webhook attempts in flight for it, across all dispatchers (permits they hold). */
  webhookAttemptsInFlight: number;
  /** Refusals per quota (cluster-wide in cluster mode, within THROTTLED_FLUSH_INTERVAL_MS). */
  throttled: Record<Quota, number>;
}

export interface TenantQuotasDeps {
  db: Kysely<Database>;
  defaults: TenantLimits;
  /** Cluster mode; undefined: every count lives in this process. */
  redis: RedisClient | undefined;
  redisPrefix: string;
  podId: string;
  logger: Logger;
  /** Called once per refusal with the quota's name (the `herald_tenant_refusals_total` counter). */
  onRefusal: (quota: Quota) => void;
  /** Called when Redis failed a check and this pod's local share answered it. */
  onFallback: () => void;
  /** HTTP operations one tenant runs at once on this pod (operation-turns.ts); 0: no turns. @default 0 */
  concurrentOperationsPerPod?: number;
  /**
   * HTTP operations a tenant alone on this pod runs at once (the database pool's size less one); undefined: the
   * same as `concurrentOperationsPerPod`.
   */
  concurrentOperationsAlone?: number;
  /** Called each time an HTTP operation waits for its tenant's turn. */
  onTurnWait?: () => void;
  /** The organisation's webhook attempts in flight now (the dispatchers count them). @default 0 */
  webhookAttemptsInFlight?: (orgId: string) => Promise<number>;
}

/**
 * The tenant quotas (docs/tenancy.md): every check a door makes, each answering in memory or with one
 * Redis round trip, never with an error of its own.
 * - `operationsPerSecond`: a GraphQL operation counts against the organisation it names when the caller
 *   belongs to it, else against the caller (`user:<sub>`): nobody spends another tenant's quota, and an
 *   administrator fixing a throttled organisation's limits is not refused by them.
 *   Anonymous operations are not counted: they reach nothing but `me`.
 * - `publishesPerSecond`: `publishPost`, against the post's organisation, before anything is written.
 * - `socketsPerUser`: open sockets per `sub`; the cap is the largest among the user's organisations.
 * - `subscriptions`: active subscriptions per organisation.
 */
export interface TenantQuotas {
  /** The environment's quotas, for organisations without overrides. */
  readonly defaults: TenantLimits;
  readonly limits: OrganizationLimitsCache;
  /** Turns of HTTP operations on this pod, per subject ({@link operationSubject}). */
  readonly turns: OperationTurns;
  /** @returns the refusal to answer with, or undefined when the operation may run */
  checkOperation(viewer: Viewer | null, orgId: string | undefined): Promise<RateLimitedError | undefined>;
  checkPublish(orgId: string): Promise<RateLimitedError | undefined>;
  /** Counts an open socket for the viewer. @returns false when the user is over the cap (close with 1013) */
  openSocket(viewer: Viewer): Promise<boolean>;
  /** The socket `openSocket` admitted is closed. */
  closeSocket(viewer: Viewer): void;
  /** Counts an active subscription on `orgId`. @returns the refusal, or undefined (then `closeSubscription` once) */
  openSubscription(orgId: string): Promise<SubscriptionLimitExceededError | undefined>;
  closeSubscription(orgId: string): void;
  usage(orgId: string): Promise<OrganizationUsage>;
  /** Pods sharing the quotas, as last seen in Redis (1 without Redis): a pod's share is 1/pods. */
  readonly pods: number;
  start(): void;
  stop(): Promise<void>;
}

export function createTenantQuotas(deps: TenantQuotasDeps): TenantQuotas {
  const { redis } = deps;
  const prefix = `${deps.redisPrefix}tenant:`;
  let pods = 1;
  let lastErrorLogAt = 0;
  const onRedisError = (error: unknown) => {
    deps.onFallback();
    const at = Date.now();
    if (at - lastErrorLogAt >= REDIS_ERROR_LOG_INTERVAL_MS) {
      lastErrorLogAt = at;
      deps.logger.warn({ err: error }, 'tenant quotas: Redis unreachable; this pod enforces its share locally');
    }
  };
  const shared = { redis, pods: () => pods, onRedisError };
  const operations = createRateQuota({ ...shared, keyPrefix: `${prefix}ops` });
  const publishes = createRateQuota({ ...shared, keyPrefix: `${prefix}publishes` });
  const sockets = createConcurrencyQuota({ ...shared, keyPrefix: `${prefix}sockets:`, podId: deps.podId });
  const orgSockets = createConcurrencyQuota({ ...shared, keyPrefix: `${prefix}org-sockets:`, podId: deps.podId });
  const subscriptions = createConcurrencyQuota({ ...shared, keyPrefix: `${prefix}subs:`, podId: deps.podId });
  const limits = createOrganizationLimitsCache({
    db: deps.db,
    defaults: deps.defaults,
    onError: (error) => deps.logger.warn({ err: error }, 'tenant quotas: limits unreadable; using the defaults'),
  });

  /** Refusals not yet added to the cluster's counts (or all of them, without Redis). */
  const throttled = new Map<string, Record<Quota, number>>();
  /** Without Redis: every refusal since start, per organisation (bounded like `throttled`). */
  const counted = new Map<string, Record<Quota, number>>();

  function refused(orgIds: readonly string[], quota: Quota) {
    deps.onRefusal(quota);
    for (const orgId of orgIds) {
      let counts = throttled.get(orgId);
      if (!counts) {
        if (throttled.size >= MAX_THROTTLED_ORGS) continue;
        counts = zeroes();
        throttled.set(orgId, counts);
      }
      counts[quota]++;
    }
  }

  async function flushThrottled() {
    if (throttled.size === 0) return;
    const batch = [...throttled];
    throttled.clear();
    if (!redis) {
      for (const [orgId, counts] of batch) {
        const total = counted.get(orgId) ?? (counted.size < MAX_THROTTLED_ORGS ? zeroes() : undefined);
        if (!total) continue;
        for (const quota of QUOTAS) total[quota] += counts[quota];
        counted.set(orgId, total);
      }
      return;
    }
    const pipeline = redis.pipeline();
    for (const [orgId, counts] of batch) {
      const key = `${prefix}throttled:${orgId}`;
      for (const quota of QUOTAS) if (counts[quota] > 0) pipeline.hincrby(key, quota, counts[quota]);
      pipeline.expire(key, THROTTLED_TTL_S);
    }
    try {
      // One key per command: a Redis Cluster client sends each to its shard.
      await pipeline.exec();
    } catch (error) {
      onRedisError(error);
    }
  }

  async function renewPresence() {
    if (!redis) return;
    const key = `${prefix}pods`;
    const at = Date.now();
    try {
      await redis.hset(key, deps.podId, String(at + POD_LEASE_MS));
      await redis.pexpire(key, POD_LEASE_MS * 2);
      const fields = await redis.hgetall(key);
      let alive = 0;
      for (const [pod, expires] of Object.entries(fields)) {
        if (Number(expires) >= at) alive++;
        else await redis.hdel(key, pod);
      }
      pods = Math.max(1, alive);
    } catch (error) {
      onRedisError(error);
    }
  }

  let renewTimer: NodeJS.Timeout | undefined;
  let flushTimer: NodeJS.Timeout | undefined;

  return {
    defaults: deps.defaults,
    limits,
    turns: createOperationTurns(deps.concurrentOperationsPerPod ?? 0, deps.onTurnWait, {
      alone: deps.concurrentOperationsAlone,
    }),
    get pods() {
      return pods;
    },
    async checkOperation(viewer, orgId) {
      if (viewer === null) return undefined;
      let subject: string;
      let limit: number;
      let charged: readonly string[];
      if (orgId !== undefined && isMemberOf(viewer, orgId)) {
        subject = operationSubject(viewer, orgId);
        limit = (await limits.limitsOf(orgId)).operationsPerSecond;
        charged = [orgId];
      } else {
        subject = operationSubject(viewer, undefined);
        limit = deps.defaults.operationsPerSecond;
        charged = viewer.orgs;
      }
      const retryAfterMs = await operations.consume(subject, limit);
      if (retryAfterMs === 0) return undefined;
      refused(charged, 'operationsPerSecond');
      return RateLimitedError.cheap('operationsPerSecond', retryAfterMs);
    },
    async checkPublish(orgId) {
      const limit = (await limits.limitsOf(orgId)).publishesPerSecond;
      const retryAfterMs = await publishes.consume(`org:${orgId}`, limit);
      if (retryAfterMs === 0) return undefined;
      refused([orgId], 'publishesPerSecond');
      return RateLimitedError.cheap('publishesPerSecond', retryAfterMs);
    },
    async openSocket(viewer) {
      const cap = await socketCap(viewer);
      if (!(await sockets.acquire(viewer.id, cap))) {
        refused(viewer.orgs, 'socketsPerUser');
        return false;
      }
      for (const orgId of socketOrgs(viewer)) void orgSockets.acquire(orgId, 0);
      return true;
    },
    closeSocket(viewer) {
      sockets.release(viewer.id);
      for (const orgId of socketOrgs(viewer)) orgSockets.release(orgId);
    },
    async openSubscription(orgId) {
      const cap = (await limits.limitsOf(orgId)).subscriptions;
      if (await subscriptions.acquire(orgId, cap)) return undefined;
      refused([orgId], 'subscriptions');
      return new SubscriptionLimitExceededError(
        'subscriptions',
        `Too many active subscriptions in this organisation: at most ${cap}`,
      );
    },
    closeSubscription(orgId) {
      subscriptions.release(orgId);
    },
    async usage(orgId) {
      await flushThrottled();
      const orgLimits = await limits.limitsOf(orgId);
      const [operationsNow, publishesNow, socketsNow, subscriptionsNow, refusals, webhooksNow] = await Promise.all([
        operations.current(`org:${orgId}`, orgLimits.operationsPerSecond),
        publishes.current(`org:${orgId}`, orgLimits.publishesPerSecond),
        orgSockets.count(orgId),
        subscriptions.count(orgId),
        throttledOf(orgId),
        (deps.webhookAttemptsInFlight?.(orgId) ?? Promise.resolve(0)).catch((error: unknown) => {
          onRedisError(error);
          return 0;
        }),
      ]);
      return {
        orgId,
        limits: orgLimits,
        operationsPerSecond: operationsNow,
        publishesPerSecond: publishesNow,
        sockets: socketsNow,
        subscriptions: subscriptionsNow,
        webhookAttemptsInFlight: webhooksNow,
        throttled: refusals,
      };
    },
    start() {
      sockets.start();
      orgSockets.start();
      subscriptions.start();
      // At start the connection is usually still being made: announce this pod once it is ready.
      if (redis && redis.status !== 'ready') redis.once('ready', () => void renewPresence());
      else void renewPresence();
      renewTimer = setInterval(() => void renewPresence(), LEASE_RENEW_INTERVAL_MS);
      renewTimer.unref();
      flushTimer = setInterval(() => void flushThrottled(), THROTTLED_FLUSH_INTERVAL_MS);
      flushTimer.unref();
    },
    async stop() {
      clearInterval(renewTimer);
      clearInterval(flushTimer);
      await flushThrottled();
      await Promise.all([sockets.stop(), orgSockets.stop(), subscriptions.stop()]);
      if (redis) await redis.hdel(`${prefix}pods`, deps.podId).catch(() => undefined);
    },
  };

  /** The socket cap of a user: the largest among their organisations (0, none, wins), else the default. */
  async function socketCap(viewer: Viewer): Promise<number> {
    if (viewer.orgs.length === 0) return deps.defaults.socketsPerUser;
    const caps = await Promise.all(
      socketOrgs(viewer).map(async (orgId) => (await limits.limitsOf(orgId)).socketsPerUser),
    );
    return caps.includes(0) ? 0 : Math.max(...caps);
  }

  async function throttledOf(orgId: string): Promise<Record<Quota, number>> {
    if (!redis) return { ...(counted.get(orgId) ?? zeroes()) };
    try {
      const fields = await redis.hgetall(`${prefix}throttled:${orgId}`);
      const counts = zeroes();
      for (const quota of QUOTAS) counts[quota] = Number(fields[quota] ?? 0);
      return counts;
    } catch (error) {
      onRedisError(error);
      return zeroes();
    }
  }
}

function socketOrgs(viewer: Viewer): readonly string[] {
  return viewer.orgs.length <= MAX_ORGS_PER_SOCKET ? viewer.orgs : viewer.orgs.slice(0, MAX_ORGS_PER_SOCKET);
}

function zeroes(): Record<Quota, number> {
  return {
    operationsPerSecond: 0,
    publishesPerSecond: 0,
    socketsPerUser: 0,
    subscriptions: 0,
    webhookAttemptsInFlight: 0,
  };
}

/**
 * Whom an operation is counted against: the organisation it names when the caller belongs to it
 * (`org:<id>`), else the caller (`user:<sub>`).
 */
export function operationSubject(viewer: Viewer, orgId: string | undefined): string {
  return orgId !== undefined && isMemberOf(viewer, orgId) ? `org:${orgId}` : `user:${viewer.id}`;
}
