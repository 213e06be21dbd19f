import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { BatchAttempter } from './attempt-batch.js';
import { type AttemptGate, createAttemptGate, type GateLane } from './attempt-gate.js';
import type { EndpointRate } from './endpoint-rate.js';
import {
  ATTEMPT_LEASE_PREFIX,
  type AttemptOutcome,
  type ClaimedDelivery,
  newLease,
  type QueuedDelivery,
} from './lease-protocol.js';
import { FIRST_CLAIMS, type StatementTurns } from './statement-turns.js';

export interface EndpointLanesOptions {
  attempter: BatchAttempter;
  /** False once the dispatcher stops: lanes finish what they have in flight, let the rest go, and end. */
  running(): boolean;
  /** At most this many attempts in flight per endpoint, across all dispatchers. */
  endpointCap: number;
  /** The a-/n-lease length (lease protocol): `timeoutMs` plus a margin. */
  leaseMs: number;
  /** One attempt's deadline (`WEBHOOK_TIMEOUT_MS`). */
  timeoutMs: number;
  /**
   * Permits for POSTs across all lanes of this dispatcher, shared fairly among organisations
   * (attempt-gate.ts). @default no limit
   */
  gate?: AttemptGate;
  /**
   * Endpoints' `rateLimitPerSecond`, shared by every dispatcher (endpoint-rate.ts). A lane over it holds
   * its deliveries and starts nothing until woken. @default no rate limits
   */
  rate?: EndpointRate;
  /**
   * Where the lanes' statements (claims, records, slot counts) take turns by organisation, leaving some
   * of the pool's connections to the rest of the dispatcher (statement-turns.ts). @default each runs at once
   */
  statements?: StatementTurns;
  logger: Logger;
}

export interface EndpointLanes {
  /**
   * Hands a work entry's delivery to its endpoint's lane. Resolves once a claim or record has
   * considered it (it was taken, or found taken, done or over the cap) and that is durable, so the
   * entry can be acknowledged; rejects when that statement failed (the entry stays pending and is
   * reclaimed).
   */
  push(item: QueuedDelivery): Promise<void>;
  /** Resolves once every lane has ended (after `running()` turned false). */
  drain(): Promise<void>;
}

interface Waiting {
  item: QueuedDelivery;
  done: () => void;
  failed: (error: unknown) => void;
}

interface Lane {
  endpointId: string;
  /** The lane as the attempt gate knows it: its organisation (from its deliveries) and its wake-up. */
  gate: GateLane;
  /** The a-lease this lane holds its deliveries under. */
  lease: string;
  /** The endpoint's URL as its claim found it. */
  url: string | undefined;
  /** The endpoint's rate limit as its last claim or hand-over found it; null: none. */
  rate: number | null;
  /** Over its rate limit: waits for the limiter's wake-up, starts nothing meanwhile. */
  rateHeld: boolean;
  /**
   * A send taken from the rate limiter and not used yet (the gate had no permit). At most one per
   * lane: a 10 s window may see one more per lane than the limiter granted in it.
   */
  sendTaken: boolean;
  waiting: Waiting[];
  /** Held, not started. */
  ready: ClaimedDelivery[];
  /** POST in flight. */
  flight: Set<ClaimedDelivery>;
  /** POST done, not yet recorded (still held). */
  done: Array<{ delivery: ClaimedDelivery; outcome: AttemptOutcome }>;
  /** POSTs this lane may have in flight: never more than its slot registration says (claim, step 3b, records). */
  slots: number;
  /** The endpoint is FIFO, as its deliveries last said (lease protocol, "FIFO endpoints"): one POST at a time, in line order. */
  fifo: boolean;
  /** The endpoint's cap: 1 for a FIFO endpoint. */
  cap: number;
  /** `performance.now()` when the statement that last renewed (or took) every held lease was sent. */
  renewedAt: number;
  recording: boolean;
  /** No more taking: a failure, a stop, or nothing startable; held deliveries are let go. */
  winding: boolean;
  /** The last record asked for more and the endpoint had none due. */
  exhausted: boolean;
  /** A statement failed: the lane stops, and what it holds comes back when the leases expire. */
  broken: boolean;
  /** `performance.now()` when it may next look for more slots. */
  growAt: number;
  /** `performance.now()` when it last looked. */
  lookedAt: number;
  /** The wait before the look after that. */
  growEveryMs: number;
  finished?: () => void;
}

/**
 * One lane per endpoint in this dispatcher, run continuously rather than in batches (lease protocol,
 * "Lanes"): a slot starts its next POST as soon as its own POST ends, from deliveries the lane holds
 * ahead; outcomes are recorded in coalesced statements, one in flight per lane, each taking every
 * outcome finished meanwhile and, in the same statement, taking the endpoint's next due deliveries
 * (and renewing the lane's leases and slots when they age). The lane runs at most as many POSTs at
 * once as its registered slots (`webhook_endpoint_slots`: a claim, advisory-locked, registers what it
 * got and counts the other lanes' slots), and each record gives slots up once it holds fewer.
 *
 * A lane starts with a claim; it winds down (lets its held deliveries go, finishes what is in flight,
 * records it) on a failed attempt (so pauses, disables and retries take the claim's path) and on
 * stop, and ends once it is out of work; while work comes, it claims again.
 */
/**
 * A busy lane records its outcomes once it has this many slot-counts of them (fewer, larger
 * statements: the dispatcher's and PostgreSQL's CPU per delivery both fall with the record's size;
 * 8 endpoints, 1 → 2: PostgreSQL 259 → 193 µs; one endpoint, 2 → 4 (with the two below 6 → 10 and
 * 2 → 3): dispatcher ~191 → ~168 µs, PostgreSQL ~343 → ~223 µs, bench/micro/dispatch-cpu.ts, A/B; one
 * endpoint, 4 → 8 (with the two below 10 → 20 and 3 → 6): past start-up 9,777–10,244 → 10,920–11,009
 * deliveries/s, dispatcher 65–68 → 58 µs, PostgreSQL 52–53 → 47 µs, `pnpm bench --scenarios webhooks`,
 * two pairs alternating; 16 gave nothing more). A record's fixed cost (bind, executor set-up, commit:
 * ~0.7 ms of its 1.8 ms at 40 outcomes) is what a larger one spreads. Only a busy lane waits for it:
 * one that runs low, or has nothing in flight, records at once.
 */
const RECORD_SLOT_COUNTS = 8;
/** Deliveries a lane holds (in flight, done, ahead), in slot-counts: refills for every slot while a record is on its way. */
const HOLD_SLOT_COUNTS = 20;
/** A record (which takes more) is due once fewer than this many slot-counts are held ahead. */
const LOW_WATER_SLOT_COUNTS = 6;
/**
 * A lane below the cap with deliveries it cannot start looks for more slots (before its next record:
 * taking more would not start them) at once when they are two slot-counts or more (each slot would
 * POST twice before the last starts), else this long after its last look. After a look that found
 * more it may look again at once; after one that found none, this long after it…
 */
const GROW_INTERVAL_MS = 50;
/** …and, while it finds none because others hold them, twice as long each time, up to this. */
const GROW_INTERVAL_MAX_MS = 1_000;

/** Endpoints whose organisation the lanes remember (statement turns); beyond it, the longest unseen is forgotten. */
const KNOWN_ENDPOINTS = 100_000;

export function createEndpointLanes(options: EndpointLanesOptions): EndpointLanes {
  const { attempter, endpointCap, logger } = options;
  const gate = options.gate ?? createAttemptGate({ concurrency: 0, orgConcurrency: 0 });
  const { rate } = options;
  // Each endpoint's organisation, as its lanes' claims found it: a new lane for an endpoint seen before
  // (after a lull, a failure) takes its turns in its organisation's line from its first claim.
  const organisations = new Map<string, string>();
  const remember = (endpointId: string, orgId: string) => {
    if (organisations.get(endpointId) === orgId) return;
    organisations.delete(endpointId);
    organisations.set(endpointId, orgId);
    // Bounded: the endpoint seen longest ago goes first.
    if (organisations.size > KNOWN_ENDPOINTS) organisations.delete(organisations.keys().next().value as string);
  };
  // A lane's statement in its organisation's turn (an endpoint not claimed for yet: the first claims' line).
  const inTurn = <T>(lane: Lane, statement: () => Promise<T>): Promise<T> =>
    options.statements
      ? options.statements.run(lane.gate.orgId || organisations.get(lane.endpointId) || FIRST_CLAIMS, statement)
      : statement();
  const lanes = new Map<string, Lane>();
  const ended = new Set<Promise<void>>();
  // A POST may start only while the leases taken or renewed at `renewedAt` outlive it by a margin
  // (half of what the lease has beyond the attempt's timeout); a record renews them halfway there.
  const freshForMs = (options.leaseMs - options.timeoutMs) / 2;
  // Held (in flight, done or ahead): enough to refill every slot several times while a record is on
  // its way, so slots never wait for one and records stay large (one statement per ~8 slot-counts of
  // deliveries). Counted in the lane's own slots, not the cap: a lane that shares the endpoint with
  // other dispatchers' lanes holds only what its slots can work through, and leaves the rest to them.
  const holdTarget = (lane: Lane) => HOLD_SLOT_COUNTS * Math.max(1, lane.slots);
  /** A record is due once fewer than this many are held ahead. */
  const lowWater = (lane: Lane) => LOW_WATER_SLOT_COUNTS * Math.max(1, lane.slots);

  const settle = (entries: readonly Waiting[], settled: Promise<void>) => {
    if (entries.length === 0) return;
    settled.then(
      () => {
        for (const entry of entries) entry.done();
      },
      (error: unknown) => {
        for (const entry of entries) entry.failed(error);
      },
    );
  };

  const held = (lane: Lane) => lane.flight.size + lane.ready.length + lane.done.length;
  const holds = (lane: Lane, { item }: Waiting) =>
    lane.ready.some((delivery) => delivery.id === item.deliveryId) ||
    lane.done.some(({ delivery }) => delivery.id === item.deliveryId) ||
    [...lane.flight].some((delivery) => delivery.id === item.deliveryId);

  function start(lane: Lane, delivery: ClaimedDelivery): void {
    lane.flight.add(delivery);
    const { orgId } = lane.gate;
    attempter.attempt(delivery).then(
      (outcome) => {
        gate.release(orgId);
        lane.flight.delete(delivery);
        attempter.onStep?.('after-post');
        lane.done.push({ delivery, outcome });
        if (outcome.health !== 'success') lane.winding = true;
        pump(lane);
      },
      (error: unknown) => {
        gate.release(orgId);
        lane.flight.delete(delivery);
        lane.broken = true;
        logger.error({ err: error, endpointId: lane.endpointId }, 'webhook attempt failed unexpectedly');
        pump(lane);
      },
    );
  }

  function pump(lane: Lane): void {
    // Stopping, or holding nothing it may start (its slots are given up): let the rest go.
    if (!options.running() || lane.slots === 0) lane.winding = true;
    const startable = !lane.winding && !lane.broken && performance.now() - lane.renewedAt <= freshForMs;
    if (startable) {
      // Each POST also takes one of the dispatcher's permits; without one the lane waits in its
      // organisation's line and is pumped again when one is reserved for it.
      // An endpoint with a rate limit also takes a send from its limiter first; refused, the lane holds
      // what it has (its records keep renewing the leases) and is pumped again when a send may be free.
      // A send taken while the gate has no permit is kept for the lane's next start: given up, the two
      // waits (both may need a round trip to Redis) could keep missing each other.
      while (lane.ready.length > 0 && lane.flight.size < Math.min(lane.slots, lane.cap) && !lane.rateHeld) {
        if (!lane.sendTaken && !withinRate(lane)) break;
        lane.sendTaken = true;
        if (!gate.tryAcquire(lane.gate)) break;
        lane.sendTaken = false;
        start(lane, lane.ready.shift()!);
      }
    }
    // Nothing it could start now: out of the line, any permit reserved for it goes to another lane.
    if (!startable || lane.rateHeld || lane.ready.length === 0 || lane.flight.size >= Math.min(lane.slots, lane.cap)) {
      gate.leave(lane.gate);
    }
    // Saturated below the cap with work waiting: look for slots nobody holds, before recording.
    // (Recording first starved this: with work arriving every few ms a record is always due, and a
    // lane whose claim found one delivery ran one slot while its backlog grew.)
    const now = performance.now();
    if (
      !lane.recording &&
      !lane.winding &&
      !lane.broken &&
      lane.slots < lane.cap &&
      lane.flight.size >= lane.slots &&
      lane.ready.length > 0 &&
      now >= lane.growAt &&
      (lane.ready.length >= 2 * lane.slots || now - lane.lookedAt >= GROW_INTERVAL_MS)
    ) {
      void grow(lane);
      return;
    }
    if (!lane.recording && !lane.broken && needsRecord(lane)) {
      void record(lane);
      return;
    }
    if (
      !lane.recording &&
      lane.flight.size === 0 &&
      (lane.broken || (lane.done.length === 0 && lane.ready.length === 0))
    ) {
      lane.finished?.();
    }
  }

  /**
   * Whether the lane's endpoint may take one more send now (always, without a rate limit).
   */
  function withinRate(lane: Lane): boolean {
    if (!rate || lane.rate === null) return true;
    const want = Math.min(lane.ready.length, lane.slots - lane.flight.size);
    if (rate.tryTake(lane.endpointId, lane.rate, want, () => wakeFromRate(lane))) return true;
    lane.rateHeld = true;
    return false;
  }

  function wakeFromRate(lane: Lane): void {
    lane.rateHeld = false;
    pump(lane);
  }

  function needsRecord(lane: Lane): boolean {
    if (lane.winding) return lane.done.length > 0 || lane.ready.length > 0;
    // Outcomes wait to be recorded until there are RECORD_SLOT_COUNTS slot-counts of them, or the
    // deliveries held ahead run low, or nothing else is going on: fewer, larger statements.
    if (lane.done.length > 0 && lane.done.length >= RECORD_SLOT_COUNTS * lane.slots) return true;
    if (lane.done.length > 0 && (lane.flight.size === 0 || lane.ready.length < lowWater(lane))) return true;
    const stale = performance.now() - lane.renewedAt > freshForMs / 2;
    if (stale && held(lane) > 0) return true;
    if (lane.exhausted) return false;
    return lane.waiting.length > 0 || lane.ready.length < lowWater(lane);
  }

  async function record(lane: Lane): Promise<void> {
    lane.recording = true;
    const done = lane.done.splice(0);
    const winding = lane.winding;
    const release = winding ? lane.ready.splice(0) : [];
    const kept = [...lane.flight, ...lane.ready];
    const stale = performance.now() - lane.renewedAt > freshForMs / 2;
    const renew = stale ? kept : [];
    const entries = winding ? [] : lane.waiting.splice(0);
    // Outcomes recorded: look for more (other dispatchers' entries may have queued some); nothing
    // recorded: only while the last look found some.
    const taking =
      !winding && (done.length > 0 || !lane.exhausted) && done.every((one) => one.outcome.health === 'success');
    const take = taking ? Math.max(0, holdTarget(lane) - kept.length) : 0;
    const sentAt = performance.now();
    try {
      const { result, settled } = await inTurn(lane, () =>
        attempter.record(
          done,
          {
            endpointId: lane.endpointId,
            leaseMs: options.leaseMs,
            lease: lane.lease,
            renew: renew.map((delivery) => delivery.id),
            release: release.map((delivery) => delivery.id),
            take,
            url: lane.url,
            slots: lane.slots,
            keep: kept.length,
            fifo: lane.fifo,
            // The slot registration lives as long as the leases: renewed with them (at least as late as
            // `renewedAt`, so it outlives every POST the lane may start), only read in between.
            renewSlots: stale,
          },
          entries.length > 0,
        ),
      );
      settle(entries, settled);
      if (renew.length > 0) {
        // Deliveries no longer held (replayed, or taken over) are dropped; one in flight finishes,
        // and its record then finds the lease changed and leaves the delivery alone.
        lane.ready = lane.ready.filter((delivery) => result.kept.has(delivery.id));
        lane.renewedAt = sentAt;
      }
      lane.ready.push(...result.handedOver);
      if (result.handedOver[0]) {
        lane.rate = result.handedOver[0].rateLimitPerSecond ?? null;
        setOrdering(lane, result.handedOver[0]);
      }
      if (result.handedOver.length > 0) attempter.onStep?.('after-claim');
      // An entry that came meanwhile for a delivery it does not hold may name one this statement did
      // not see yet: not out of work.
      if (take > 0)
        lane.exhausted = result.handedOver.length < take && !lane.waiting.some((entry) => !holds(lane, entry));
      // Disabled, deleted, paused elsewhere, or moved: what it holds goes back, through a claim.
      if (result.halt) lane.winding = true;
      // The record set the lane's registration to at most what it holds (null: it is lost, and with
      // it the slots); the lane never runs more than its registration says.
      lane.slots = Math.min(lane.slots, result.slots ?? 0, held(lane));
    } catch (error) {
      for (const entry of entries) entry.failed(error);
      lane.broken = true;
      logger.warn({ err: error, endpointId: lane.endpointId }, 'recording webhook attempts failed');
    } finally {
      lane.recording = false;
      pump(lane);
    }
  }

  /**
   * More slots, when nobody holds them (lease protocol step 3b): the lane's registration is raised
   * under the claim's lock to what the others leave, never beyond what the lane holds. Runs as the
   * lane's one statement in flight (no record changes what the lane holds meanwhile).
   */
  async function grow(lane: Lane): Promise<void> {
    lane.recording = true;
    lane.lookedAt = performance.now();
    try {
      // Slots for what it could start: in flight and held ahead (finished ones need none).
      const want = lane.flight.size + lane.ready.length;
      const { slots, others } = await inTurn(lane, () => attempter.growSlots(lane.endpointId, lane.lease, want));
      const room = endpointCap - others;
      const grew = slots !== null && slots > lane.slots;
      // Raised, or unchanged; null: the registration lapsed, so the lane has no slots left.
      lane.slots = slots === null ? 0 : Math.max(lane.slots, slots);
      // Others hold slots it could use: look less and less often. Otherwise (the cap reached is no
      // reason to wait once it has shrunk again): at once after finding more, else a while later.
      const crowded = room < Math.min(endpointCap, want);
      lane.growEveryMs = crowded ? Math.min(2 * lane.growEveryMs, GROW_INTERVAL_MAX_MS) : GROW_INTERVAL_MS;
      lane.growAt = grew && !crowded ? 0 : performance.now() + lane.growEveryMs;
    } catch (error) {
      lane.growAt = performance.now() + GROW_INTERVAL_MAX_MS;
      logger.warn({ err: error, endpointId: lane.endpointId }, 'counting webhook slots failed');
    } finally {
      lane.recording = false;
      pump(lane);
    }
  }

  function setOrdering(lane: Lane, delivery: ClaimedDelivery): void {
    lane.fifo = delivery.fifo === true;
    lane.cap = lane.fifo ? 1 : endpointCap;
  }

  /** Runs the lane from its claimed deliveries until it has wound down or run out of work. */
  function run(lane: Lane, claimed: readonly ClaimedDelivery[], claimedAt: number): Promise<void> {
    lane.ready = [...claimed];
    lane.flight.clear();
    lane.done = [];
    lane.slots = claimed.length;
    if (claimed[0]) setOrdering(lane, claimed[0]);
    lane.url = claimed[0]?.url;
    lane.rate = claimed[0]?.rateLimitPerSecond ?? null;
    // A send kept from an earlier run would be late now: given up (less throughput, never more).
    lane.sendTaken = false;
    // An endpoint belongs to one organisation.
    if (claimed[0]) {
      lane.gate.orgId = claimed[0].orgId;
      remember(lane.endpointId, claimed[0].orgId);
    }
    lane.renewedAt = claimedAt;
    lane.winding = false;
    lane.exhausted = false;
    lane.broken = false;
    // Its claim found fewer than the cap: it looks for more as soon as it holds more.
    lane.growAt = 0;
    lane.growEveryMs = GROW_INTERVAL_MS;
    return new Promise<void>((resolve) => {
      lane.finished = () => {
        lane.finished = undefined;
        resolve();
      };
      pump(lane);
    });
  }

  async function drive(lane: Lane): Promise<void> {
    let chaining = true;
    try {
      while (lane.waiting.length > 0 || (chaining && options.running())) {
        const entries = lane.waiting.splice(0);
        const sentAt = performance.now();
        let claimed: ClaimedDelivery[];
        try {
          const claim = await inTurn(lane, () =>
            attempter.claim(
              entries.map((entry) => entry.item),
              options.running() ? [lane.endpointId] : [],
              lane.lease,
              lane.fifo,
            ),
          );
          settle(entries, claim.settled);
          claimed = claim.claimed;
        } catch (error) {
          for (const entry of entries) entry.failed(error);
          logger.warn({ err: error, endpointId: lane.endpointId }, 'claiming deliveries failed');
          chaining = false;
          continue;
        }
        if (claimed.length === 0) {
          chaining = false;
          continue;
        }
        attempter.onStep?.('after-claim');
        await run(lane, claimed, sentAt);
        // Out of work: done. Wound down after a failure: the claim's path (pauses, retries) goes on.
        chaining = !lane.broken && !lane.exhausted;
      }
    } finally {
      lanes.delete(lane.endpointId);
      // Entries that arrived as the lane ended get a lane of their own.
      if (lane.waiting.length > 0) {
        lanes.set(lane.endpointId, lane);
        track(drive(lane));
      }
    }
  }

  function track(driving: Promise<void>): void {
    ended.add(driving);
    void driving.finally(() => ended.delete(driving));
  }

  return {
    push(item) {
      return new Promise<void>((done, failed) => {
        let lane = lanes.get(item.endpointId);
        if (lane) {
          lane.waiting.push({ item, done, failed });
          // New work for a running lane: its next record looks for it.
          if (lane.finished) {
            lane.exhausted = false;
            pump(lane);
          }
          return;
        }
        const gateLane: GateLane = { orgId: '', wake: () => pump(created) };
        const created: Lane = {
          endpointId: item.endpointId,
          gate: gateLane,
          lease: newLease(ATTEMPT_LEASE_PREFIX),
          url: undefined,
          rate: null,
          rateHeld: false,
          sendTaken: false,
          waiting: [{ item, done, failed }],
          ready: [],
          flight: new Set(),
          done: [],
          slots: 0,
          fifo: false,
          cap: endpointCap,
          renewedAt: 0,
          recording: false,
          winding: false,
          exhausted: false,
          broken: false,
          growAt: 0,
          lookedAt: 0,
          growEveryMs: GROW_INTERVAL_MS,
        };
        lane = created;
        lanes.set(item.endpointId, lane);
        // Started after the current read's entries are all in, so the first claim takes them together.
        const started = lane;
        queueMicrotask(() => track(drive(started)));
      });
    },
    async drain() {
      while (ended.size > 0) await Promise.all([...ended]);
    },
  };
}
