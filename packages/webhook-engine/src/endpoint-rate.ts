import type { RedisClient } from '@herald/config/redis';
import type { WebhookRedisKeys } from '@herald/contracts';
import type { Logger } from 'pino';

/**
 * Per-endpoint rate limits (`rateLimitPerSecond`), shared by every dispatcher.
 *
 * Scheme: GCRA (the generic cell rate algorithm, a token bucket kept as one timestamp). Each endpoint
 * has a "theoretical arrival time" (TAT): the earliest send time still free. A send at `now` is allowed
 * while `TAT ≤ now + τ`, and pushes TAT one interval (`1 s / rate`) on; `τ = (burst − 1) × interval`.
 * Every allowed send owns a distinct slot on the TAT line, slots one interval apart, none earlier than
 * its grant and none more than τ after it; so the sends granted in any window of T seconds number at
 * most `rate × T + burst`. With `burst = max(1, ⌊rate / 20⌋)` a 10 s window sees at most ten seconds'
 * worth plus one send (at 20/s: 201 of 200), or plus half a percent at higher rates, and a dispatcher
 * asks Redis at most ~20 times a second per endpoint. A lane that took a send and then waits for its
 * organisation's permit keeps it for its next start (endpoint-lanes.ts): one more per lane at most.
 *
 * Why not rate-limiter-flexible (which the API's quotas use): its limiters count fixed windows, so a
 * 10 s span that starts at the end of one 1 s window and ends at the start of the 11th sees 11 windows'
 * worth, 10 % over, and any two adjacent windows allow 2× the rate in a second. GCRA keeps the bound
 * for every window at the cost of a ten-line script.
 *
 * Cluster mode: TAT lives in Redis (`…webhooks:rate:{<endpointId>}`, expiring once it is in the
 * past), advanced by one Lua script that reads the server's clock, so every dispatcher shares one
 * line and clocks of dispatchers never matter. A dispatcher asks for what its lane could start now (at
 * most `burst`), and spends what it got at once: grants not used within {@link GRANT_TTL_MS} are
 * dropped (throughput lost, never the limit). Embedded mode (no Redis): the same arithmetic in memory.
 *
 * Redis unreachable: each dispatcher enforces `ceil(rate / dispatchers)` locally (dispatchers: how
 * many were live when Redis last answered, see dispatcher-presence.ts), so the endpoint keeps getting
 * deliveries at about its rate, and at most its rate plus one such share per dispatcher cut off from
 * Redis while the others still reach it; nothing is failed. Once Redis answers (asked again a second
 * after a failure), the shared line takes over.
 *
 * Waiting never fails a delivery: {@link EndpointRate.tryTake} only says "not yet", and arranges one
 * wake-up when a send may be free again (at most {@link MAX_WAIT_MS} later, so a waiting lane still
 * renews its leases in time). The lane holds its deliveries meanwhile (endpoint-lanes.ts).
 */

/** Grants not spent this long after they arrived are dropped (a late spend could bunch sends). */
export const GRANT_TTL_MS = 50;
/** A waiting lane is woken at least this often, whatever the wait: it renews its leases then. */
export const MAX_WAIT_MS = 1_000;
/** Endpoints remembered before idle ones are forgotten. */
const MAX_ENDPOINTS_KEPT = 10_000;
/** After Redis failed, wait this long before asking it again (the local share answers meanwhile). */
const REDIS_RETRY_MS = 1_000;

/** The burst of an endpoint limited to `rate` a second: one, or a twentieth of a second's worth. */
export const burstOf = (rate: number) => Math.max(1, Math.floor(rate / 20));

/** One GCRA step: of `want` sends at `nowMs`, how many are allowed, the new TAT, and else the wait. */
export function gcraTake(
  tatMs: number,
  nowMs: number,
  rate: number,
  burst: number,
  want: number,
): { granted: number; tatMs: number; waitMs: number } {
  const interval = 1_000 / rate;
  const tau = (burst - 1) * interval;
  const base = Math.max(tatMs, nowMs);
  const room = Math.floor((nowMs + tau - base) / interval + 1e-9) + 1;
  const granted = Math.max(0, Math.min(want, room));
  if (granted > 0) return { granted, tatMs: base + granted * interval, waitMs: 0 };
  return { granted: 0, tatMs: base, waitMs: Math.max(1, Math.ceil(base - tau - nowMs)) };
}

// KEYS[1] the endpoint's TAT (microseconds, server clock); ARGV interval µs, burst, want.
// Returns {granted, wait ms}. Same arithmetic as gcraTake, in microseconds.
const TAKE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tau = (tonumber(ARGV[2]) - 1) * interval
local want = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local room = math.floor((now + tau - tat) / interval) + 1
if room > want then room = want end
if room > 0 then
  tat = tat + room * interval
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
  return {room, 0}
end
local wait = math.ceil((tat - tau - now) / 1000)
if wait < 1 then wait = 1 end
return {0, wait}
`;

interface ScriptedRedis {
  heraldWebhookRateTake(key: string, interval: string, burst: string, want: string): Promise<[number, number]>;
}

export interface EndpointRate {
  /**
   * True, and one send is the caller's, when `endpointId` (limited to `rate` a second) may start an
   * attempt now. False: `wake` is called once, when it is worth asking again; meanwhile nothing is
   * started. `want` is how many the caller could start now (a hint for how many to ask Redis for).
   */
  tryTake(endpointId: string, rate: number, want: number, wake: () => void): boolean;
  /** Drops what waits (wake-ups are not called). */
  stop(): void;
}

export interface EndpointRateOptions {
  /** Cluster mode: the shared TATs live here. Undefined: in memory (one dispatcher). */
  redis?: RedisClient | undefined;
  keys?: WebhookRedisKeys;
  /** Live dispatchers as last seen in Redis (the local share while Redis is away). @default 1 */
  dispatchers?: () => number;
  /** Called once per refusal (a lane held back). */
  onThrottled?: () => void;
  logger: Logger;
  now?: () => number;
}

interface EndpointState {
  /** Sends granted and not yet spent, usable until `grantsUntil`. */
  grants: number;
  grantsUntil: number;
  /** The in-memory TAT (no Redis, or Redis away). */
  tatMs: number;
  asking: boolean;
  timer: NodeJS.Timeout | undefined;
  wakes: Set<() => void>;
}

export function createEndpointRate(options: EndpointRateOptions): EndpointRate {
  const now = options.now ?? Date.now;
  const redis = options.redis ? scripted(options.redis) : undefined;
  const states = new Map<string, EndpointState>();
  let redisDownUntil = 0;
  let stopped = false;

  const stateOf = (endpointId: string) => {
    let state = states.get(endpointId);
    if (!state) {
      if (states.size >= MAX_ENDPOINTS_KEPT) prune();
      state = { grants: 0, grantsUntil: 0, tatMs: 0, asking: false, timer: undefined, wakes: new Set() };
      states.set(endpointId, state);
    }
    return state;
  };

  /** Forgets endpoints nothing waits on whose line is in the past (they start afresh, as in Redis). */
  const prune = () => {
    const at = now();
    for (const [endpointId, state] of states) {
      if (state.tatMs < at && !state.asking && state.timer === undefined && state.wakes.size === 0) {
        states.delete(endpointId);
      }
    }
  };

  const wakeAll = (state: EndpointState) => {
    const wakes = [...state.wakes];
    state.wakes.clear();
    for (const wake of wakes) wake();
  };

  /** Wakes the waiting lanes after `waitMs` (capped), replacing any wake-up already set. */
  const wakeAfter = (state: EndpointState, waitMs: number) => {
    clearTimeout(state.timer);
    state.timer = undefined;
    if (stopped) return;
    state.timer = setTimeout(
      () => {
        state.timer = undefined;
        // Still no answer from Redis: it counts as failed, and the local share answers meanwhile.
        if (state.asking) redisFailed(new Error(`no answer from Redis within ${MAX_WAIT_MS} ms`));
        wakeAll(state);
      },
      Math.min(MAX_WAIT_MS, Math.max(1, waitMs)),
    );
    state.timer.unref?.();
  };

  const redisFailed = (error: unknown) => {
    if (now() >= redisDownUntil) {
      options.logger.warn({ err: error }, 'webhook rate limits: Redis failed; each dispatcher keeps its share a while');
    }
    redisDownUntil = now() + REDIS_RETRY_MS;
  };

  /** The in-memory line: the whole rate without Redis, this dispatcher's share while Redis is away. */
  const takeLocally = (state: EndpointState, rate: number, want: number) => {
    const step = gcraTake(state.tatMs, now(), rate, burstOf(rate), want);
    state.tatMs = step.tatMs;
    return step;
  };

  const ask = (endpointId: string, state: EndpointState, rate: number, want: number) => {
    state.asking = true;
    // Woken at the latest this long after asking, answer or not.
    wakeAfter(state, MAX_WAIT_MS);
    const interval = Math.max(1, Math.round(1_000_000 / rate));
    redis!
      .heraldWebhookRateTake(
        options.keys!.endpointRate(endpointId),
        String(interval),
        String(burstOf(rate)),
        String(want),
      )
      .then(
        ([granted, waitMs]) => {
          state.asking = false;
          if (Number(granted) > 0) {
            state.grants = Number(granted);
            state.grantsUntil = now() + GRANT_TTL_MS;
            clearTimeout(state.timer);
            state.timer = undefined;
            wakeAll(state);
          } else {
            wakeAfter(state, Number(waitMs));
          }
        },
        (error: unknown) => {
          state.asking = false;
          redisFailed(error);
          clearTimeout(state.timer);
          state.timer = undefined;
          wakeAll(state);
        },
      );
  };

  return {
    tryTake(endpointId, rate, want, wake) {
      const state = stateOf(endpointId);
      if (state.grants > 0 && now() <= state.grantsUntil) {
        state.grants--;
        return true;
      }
      state.grants = 0;
      if (!redis || now() < redisDownUntil) {
        const share = redis ? Math.max(1, Math.ceil(rate / Math.max(1, options.dispatchers?.() ?? 1))) : rate;
        const step = takeLocally(state, share, Math.max(1, want));
        if (step.granted > 0) {
          state.grants = step.granted - 1;
          state.grantsUntil = now() + GRANT_TTL_MS;
          return true;
        }
        options.onThrottled?.();
        state.wakes.add(wake);
        if (state.timer === undefined) wakeAfter(state, step.waitMs);
        return false;
      }
      options.onThrottled?.();
      state.wakes.add(wake);
      // One question to Redis at a time per endpoint; after a "wait", the next one once it has passed.
      if (!state.asking && state.timer === undefined) {
        ask(endpointId, state, rate, Math.max(1, Math.min(want, burstOf(rate))));
      }
      return false;
    },
    stop() {
      stopped = true;
      for (const state of states.values()) {
        clearTimeout(state.timer);
        state.wakes.clear();
      }
      states.clear();
    },
  };
}

/** Defines the script once per client (ioredis: EVALSHA, loading the script when a node lacks it). */
function scripted(redis: RedisClient): RedisClient & ScriptedRedis {
  const client = redis as RedisClient & Partial<ScriptedRedis>;
  if (typeof client.heraldWebhookRateTake !== 'function') {
    redis.defineCommand('heraldWebhookRateTake', { numberOfKeys: 1, lua: TAKE_SCRIPT });
  }
  return client as RedisClient & ScriptedRedis;
}
