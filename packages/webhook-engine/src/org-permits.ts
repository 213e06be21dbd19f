import type { RedisClient } from '@herald/config/redis';
import type { WebhookRedisKeys } from '@herald/contracts';
import type { Logger } from 'pino';

/**
 * An organisation's webhook attempts in flight across every dispatcher
 * (`TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT`, or its override): permits held in Redis, spent locally.
 *
 * Each dispatcher holds some of an organisation's permits; its attempt gate (attempt-gate.ts) starts
 * at most that many of the organisation's POSTs at once, with its usual turns among organisations.
 * Holding is counted per dispatcher in one Redis hash per organisation, `…webhooks:in-flight:{<orgId>}`:
 * field = consumer name, value `<held>:<wanted>:<expires at, ms, Redis clock>`. Two scripts:
 * - take: the gate is short of permits (lanes wait, `wanted` > `held`). The script drops expired
 *   fields, sums the other dispatchers' held permits, and raises this one's to at most `cap − others`;
 *   while another dispatcher wants more than it holds, not beyond a fair share (`ceil(cap / dispatchers
 *   holding or wanting)`). Short still: asked again after a backoff (50 ms doubling to 1 s), never in a
 *   loop. A dispatcher also re-asks at once when its own releases leave it short.
 * - set: a dispatcher gives back what it no longer needs when a POST ends: all it does not use when no
 *   lane of the organisation waits here (after a linger of 100 ms, so a steady trickle of attempts takes
 *   no round trip per attempt; at once while another dispatcher waits), else whatever is above its fair
 *   share when others wait (it
 *   learns that from a take's answer: one holding more than an even share while its own lanes wait
 *   sends a take on its releases, at most every 100 ms). The same script renews every field it holds
 *   each third of the lease.
 * Between concurrent updates of one dispatcher's field, order is kept by sending them on one
 * connection and never writing while a take is on its way (its answer settles what was released).
 * A permit is never used by two dispatchers: a dispatcher starts a POST only within what the script
 * granted it, and gives back only what it does not use. A dispatcher that dies stops renewing: its
 * fields expire within the lease (`WEBHOOK_TIMEOUT_MS × 1.5`), after which the others may use them.
 *
 * Why a hand-written script, not rate-limiter-flexible: its limiters count units per time window; a
 * count of things in flight needs a holder's share to vanish when the holder dies without releasing
 * it (the API's socket and subscription caps are built the same way, for the same reason). A field per
 * dispatcher rather than a sorted set of permit ids: one field renews all of a dispatcher's permits,
 * and a start or an end costs no Redis round trip while the dispatcher holds enough.
 *
 * Redis unreachable (a take or a renewal fails, or no answer within a second): a dispatcher
 * holds `ceil(cap / dispatchers)` (dispatchers as last counted, dispatcher-presence.ts, or holding
 * permits of the organisation, whichever is more), on its own, so each one keeps going on its share;
 * nothing is failed, nothing refused for good. While its field has not lapsed yet the others cannot
 * take its permits, and once it has, it starts no more than its share: the organisation sees at most
 * its cap plus one share per dispatcher cut off. Once Redis answers again, the fields written say what
 * each dispatcher really has in flight. The share rests on the count a dispatcher last read (renewed each
 * second): one cut off within a second of another dispatcher's start still counts itself alone, keeps up
 * to the whole cap, and the organisation may see up to twice its cap until Redis answers again.
 *
 * Without Redis (embedded mode, one dispatcher) the whole cap is this dispatcher's.
 */

/** Asking again while short: first after this long… */
const RETRY_MIN_MS = 50;
/** …doubling up to this. */
const RETRY_MAX_MS = 1_000;
/**
 * A dispatcher holding more than an even share while its lanes still wait checks this often (on its
 * releases) whether another dispatcher waits too; if one does, it gives back down to the even share.
 */
const SHARE_CHECK_MS = 100;
/** A take with no answer within this long counts as Redis failing. */
const ANSWER_TIMEOUT_MS = 1_000;
/**
 * Permits left unused (no lane of the organisation waits here) are kept this long before they are given
 * back: the next attempt of a steady trickle starts on them with no take and no give-back in between (two
 * script round trips per attempt otherwise). Not while another dispatcher is known to wait.
 */
export const LINGER_MS = 100;

// KEYS[1] the organisation's hash. ARGV me, wanted, cap, in use here, lease ms.
// Returns {held, others waiting (0/1), fair share}.
const TAKE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me = ARGV[1]
local wanted = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local inUse = tonumber(ARGV[4])
local fields = redis.call('HGETALL', KEYS[1])
local others, waiting, present, own = 0, 0, 1, 0
for i = 1, #fields, 2 do
  local held, want, expires = string.match(fields[i + 1], '^(%d+):(%d+):(%d+)$')
  if not held or tonumber(expires) < now then
    redis.call('HDEL', KEYS[1], fields[i])
  elseif fields[i] == me then
    own = tonumber(held)
  else
    others = others + tonumber(held)
    present = present + 1
    if tonumber(want) > tonumber(held) then waiting = 1 end
  end
end
local share = math.ceil(cap / present)
local target = math.min(wanted, cap - others)
if waiting == 1 then target = math.min(target, math.max(own, share)) end
if target < inUse then target = inUse end
redis.call('HSET', KEYS[1], me, target .. ':' .. wanted .. ':' .. (now + tonumber(ARGV[5])))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]) * 2)
return {target, waiting, share}
`;

// KEYS[1] the organisation's hash. ARGV me, held, wanted, lease ms. Writes (or, at 0 and 0, removes)
// this dispatcher's field.
const SET_SCRIPT = `
if tonumber(ARGV[2]) == 0 and tonumber(ARGV[3]) == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3] .. ':' .. (now + tonumber(ARGV[4])))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]) * 2)
return 1
`;

// KEYS[1] the organisation's hash. Returns the permits held by live dispatchers.
const COUNT_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fields = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #fields, 2 do
  local held, want, expires = string.match(fields[i + 1], '^(%d+):(%d+):(%d+)$')
  if held and tonumber(expires) >= now then total = total + tonumber(held) end
end
return total
`;

interface ScriptedRedis {
  heraldWebhookPermitsTake(key: string, ...args: string[]): Promise<[number, number, number]>;
  heraldWebhookPermitsSet(key: string, ...args: string[]): Promise<number>;
  heraldWebhookPermitsCount(key: string): Promise<number>;
}

export interface OrgPermits {
  /** How many of the organisation's POSTs this dispatcher may have in flight now (Infinity: no cap). */
  limit(orgId: string): number;
  /** The gate is short for `orgId`: it could use `demand` permits now (in flight and waiting). */
  want(orgId: string, demand: number): void;
  /** A permit of `orgId` came back (the gate's counts, `inUse` and `waiting`, are already updated). */
  released(orgId: string): void;
  /** The organisation's permits held by all live dispatchers (this one's alone without Redis). */
  inFlight(orgId: string): Promise<number>;
  start(): void;
  /** Gives back everything held (other dispatchers get it now, not after the lease). */
  stop(): Promise<void>;
}

export interface OrgPermitsOptions {
  /** Cluster mode: permits are shared here. Undefined: the whole cap is this dispatcher's. */
  redis?: RedisClient | undefined;
  keys?: WebhookRedisKeys;
  /** This dispatcher's field in every hash (its consumer name). */
  consumerName: string;
  /** How long a field lives without renewal: the attempt lease (a dead dispatcher's permits are free after it). */
  leaseMs: number;
  /**
   * The organisation's cap (its override, else `TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT`); 0: none; undefined:
   * not known yet (nothing is started for it until `onChange` says it is).
   */
  capOf(orgId: string): number | undefined;
  /** The organisation's limit went up: the gate hands out what is free. */
  onChange(orgId: string): void;
  /** Live dispatchers as last seen (the local share while Redis is away). @default 1 */
  dispatchers?: () => number;
  /** The organisation's permits out in this dispatcher now, reserved ones included (a take never grants less). */
  inUse(orgId: string): number;
  /** The organisation's lanes waiting in this dispatcher's gate now. */
  waiting(orgId: string): number;
  logger: Logger;
}

interface OrgState {
  held: number;
  wanted: number;
  asking: boolean;
  retry: NodeJS.Timeout | undefined;
  retryMs: number;
  othersWaiting: boolean;
  share: number;
  /** `Date.now()` of the last take sent. */
  askedAt: number;
  /** Unused permits are kept until this fires (LINGER_MS after they were first left unused). */
  linger: NodeJS.Timeout | undefined;
  /** Set while the linger's own trim runs: what is unused goes back now. */
  lingerOver: boolean;
}

export function createOrgPermits(options: OrgPermitsOptions): OrgPermits {
  const redis = options.redis ? scripted(options.redis) : undefined;
  const states = new Map<string, OrgState>();
  const lease = String(options.leaseMs);
  let renewTimer: NodeJS.Timeout | undefined;
  let redisWarnedAt = 0;
  let stopped = false;

  const keyOf = (orgId: string) => options.keys!.orgInFlight(orgId);
  const stateOf = (orgId: string) => {
    let state = states.get(orgId);
    if (!state) {
      state = {
        held: 0,
        wanted: 0,
        asking: false,
        retry: undefined,
        retryMs: RETRY_MIN_MS,
        othersWaiting: false,
        share: Number.POSITIVE_INFINITY,
        askedAt: 0,
        linger: undefined,
        lingerOver: false,
      };
      states.set(orgId, state);
    }
    return state;
  };

  const warn = (error: unknown) => {
    if (Date.now() - redisWarnedAt < 10_000) return;
    redisWarnedAt = Date.now();
    options.logger.warn({ err: error }, 'webhook in-flight caps: Redis failed; each dispatcher keeps its share');
  };

  /** This dispatcher's share of the organisation's cap while Redis is away. */
  const localShare = (orgId: string, state: OrgState) => {
    const cap = options.capOf(orgId) ?? 0;
    return Math.min(state.share, Math.max(1, Math.ceil(cap / Math.max(1, options.dispatchers?.() ?? 1))));
  };

  const write = (orgId: string, state: OrgState) => {
    void redis!
      .heraldWebhookPermitsSet(keyOf(orgId), options.consumerName, String(state.held), String(state.wanted), lease)
      .catch((error: unknown) => {
        warn(error);
        // Its field will lapse and others may take what it held: from now on, its share only.
        state.held = Math.min(state.held, localShare(orgId, state));
      });
  };

  const scheduleRetry = (orgId: string, state: OrgState) => {
    if (state.retry || stopped) return;
    state.retry = setTimeout(() => {
      state.retry = undefined;
      if (state.wanted > state.held) ask(orgId, state);
    }, state.retryMs);
    state.retry.unref?.();
    state.retryMs = Math.min(RETRY_MAX_MS, state.retryMs * 2);
  };

  function ask(orgId: string, state: OrgState): void {
    const cap = options.capOf(orgId);
    if (state.asking || stopped || cap === undefined) return;
    state.asking = true;
    state.askedAt = Date.now();
    let answered = false;
    const fallback = (error: unknown) => {
      if (answered) return;
      answered = true;
      state.asking = false;
      warn(error);
      // Its share, on its own, until Redis answers again (what it holds beyond is not started again).
      const before = state.held;
      state.held = Math.min(state.wanted, localShare(orgId, state));
      state.retryMs = RETRY_MAX_MS;
      if (state.held > before) options.onChange(orgId);
      if (state.wanted > state.held) scheduleRetry(orgId, state);
    };
    const timeout = setTimeout(
      () => fallback(new Error(`no answer from Redis within ${ANSWER_TIMEOUT_MS} ms`)),
      ANSWER_TIMEOUT_MS,
    );
    timeout.unref?.();
    redis!
      .heraldWebhookPermitsTake(
        keyOf(orgId),
        options.consumerName,
        String(state.wanted),
        String(cap),
        String(options.inUse(orgId)),
        lease,
      )
      .then(
        ([held, waiting, share]) => {
          clearTimeout(timeout);
          if (answered) return;
          answered = true;
          state.asking = false;
          const before = state.held;
          state.held = Number(held);
          state.othersWaiting = Number(waiting) === 1;
          state.share = Number(share);
          if (state.held > before) options.onChange(orgId);
          // Releases while it asked were not written (they could have reached Redis after the take
          // and been overwritten by it): settle them now.
          trim(orgId, state);
          if (state.wanted > state.held) scheduleRetry(orgId, state);
          else state.retryMs = RETRY_MIN_MS;
        },
        (error: unknown) => {
          clearTimeout(timeout);
          fallback(error);
        },
      );
  }

  /**
   * Gives back what the organisation does not need here: all it does not use when none of its lanes
   * waits, else whatever is above the fair share while other dispatchers wait; asks for more when short.
   */
  function trim(orgId: string, state: OrgState): void {
    const cap = options.capOf(orgId);
    if (state.asking || cap === undefined) return;
    const inUse = options.inUse(orgId);
    const waiting = options.waiting(orgId);
    state.wanted = cap > 0 ? Math.min(cap, inUse + waiting) : inUse + waiting;
    let keep = state.held;
    if (waiting === 0 && state.held > inUse) {
      if (state.othersWaiting || state.lingerOver || stopped) keep = inUse;
      else if (!state.linger) {
        state.linger = setTimeout(() => {
          state.linger = undefined;
          state.lingerOver = true;
          try {
            trim(orgId, state);
          } finally {
            state.lingerOver = false;
          }
        }, LINGER_MS);
        state.linger.unref?.();
      }
    }
    if (state.othersWaiting) keep = Math.min(keep, state.share);
    keep = Math.max(inUse, cap > 0 ? Math.min(keep, cap) : keep);
    if (keep < state.held) {
      state.held = keep;
      write(orgId, state);
    }
    if (state.held === 0 && state.wanted === 0 && !state.retry && !state.linger) {
      states.delete(orgId);
      return;
    }
    if (state.wanted > state.held && !state.retry) {
      ask(orgId, state);
      return;
    }
    // Busy beyond an even share: does another dispatcher wait? (It learns only from a take's answer.)
    const even = Math.ceil((cap > 0 ? cap : state.held) / Math.max(1, options.dispatchers?.() ?? 1));
    if (waiting > 0 && state.held > even && Date.now() - state.askedAt >= SHARE_CHECK_MS) ask(orgId, state);
  }

  return {
    limit(orgId) {
      const cap = options.capOf(orgId);
      if (cap === undefined) return 0;
      if (cap <= 0) return Number.POSITIVE_INFINITY;
      if (!redis) return cap;
      return Math.min(states.get(orgId)?.held ?? 0, cap);
    },
    want(orgId, demand) {
      const cap = options.capOf(orgId);
      if (!redis || cap === undefined || cap <= 0) return;
      const state = stateOf(orgId);
      state.wanted = Math.min(demand, cap);
      if (state.wanted > state.held && !state.retry) ask(orgId, state);
    },
    released(orgId) {
      if (!redis) return;
      const state = states.get(orgId);
      if (state) trim(orgId, state);
    },
    async inFlight(orgId) {
      if (redis) {
        try {
          return Number(await redis.heraldWebhookPermitsCount(keyOf(orgId)));
        } catch (error) {
          warn(error);
        }
      }
      return options.inUse(orgId);
    },
    start() {
      if (!redis || renewTimer) return;
      renewTimer = setInterval(
        () => {
          // Not while a take is on its way: the take's own write is newer.
          for (const [orgId, state] of states) {
            if (!state.asking && (state.held > 0 || state.wanted > 0)) write(orgId, state);
          }
        },
        Math.max(100, Math.floor(options.leaseMs / 3)),
      );
      renewTimer.unref();
    },
    async stop() {
      stopped = true;
      clearInterval(renewTimer);
      renewTimer = undefined;
      for (const state of states.values()) {
        clearTimeout(state.retry);
        clearTimeout(state.linger);
      }
      if (redis) {
        await Promise.all(
          [...states.keys()].map((orgId) =>
            redis.heraldWebhookPermitsSet(keyOf(orgId), options.consumerName, '0', '0', lease).catch(warn),
          ),
        );
      }
      states.clear();
    },
  };
}

/**
 * An organisation's webhook permits held by all live dispatchers now (at least its attempts in flight,
 * at most its cap), for `organizationUsage`: one script on the organisation's hash.
 */
export async function countOrgPermits(redis: RedisClient, keys: WebhookRedisKeys, orgId: string): Promise<number> {
  return Number(await scripted(redis).heraldWebhookPermitsCount(keys.orgInFlight(orgId)));
}

/** Defines the scripts once per client (ioredis: EVALSHA, loading the script when a node lacks it). */
function scripted(redis: RedisClient): RedisClient & ScriptedRedis {
  const client = redis as RedisClient & Partial<ScriptedRedis>;
  if (typeof client.heraldWebhookPermitsTake !== 'function') {
    redis.defineCommand('heraldWebhookPermitsTake', { numberOfKeys: 1, lua: TAKE_SCRIPT });
    redis.defineCommand('heraldWebhookPermitsSet', { numberOfKeys: 1, lua: SET_SCRIPT });
    redis.defineCommand('heraldWebhookPermitsCount', { numberOfKeys: 1, lua: COUNT_SCRIPT });
  }
  return client as RedisClient & ScriptedRedis;
}
