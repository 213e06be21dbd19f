/**
 * What the webhook scenario is configured with and what it reports (the shapes main.ts, report.ts and
 * results.json share), and the ratio of a dispatcher run to the raw durable trials beside it.
 */
import { round, type Spread } from '../common.js';
import type { DuplicateSample } from '../webhook-receiver.js';
import type { DispatcherBuild } from './children.js';

export interface WebhookConfig {
  databaseUrl: string | undefined;
  redisUrl: string | undefined;
  /** Raw POST loop: trials × duration, over this many keep-alive connections. */
  trials: number;
  trialMs: number;
  connections: number;
  /** Events published (outbox backlog) before the dispatcher starts; it is timed draining them. */
  dispatcherEvents: number;
  dispatcherTimeoutMs: number;
  /** Also drain the backlog with two dispatcher processes. @default true */
  twoDispatchers?: boolean;
  /** Also drain the backlog to a FIFO endpoint (one dispatcher) and check its order. @default true */
  fifo?: boolean;
  /**
   * Drain the backlog with one dispatcher from a new process this many times, each run in a process of its
   * own with a raw durable trial after it. On a shared host one new process's figures move by a quarter
   * from run to run, so the median of a few is the figure to compare. @default 1
   */
  newProcessRuns?: number;
  /**
   * Diagnostics (env `BENCH_TRACE_FAN_OUT=1`): each backlog run logs when its outbox is fully fanned out, with
   * the deliveries verified and the dispatcher's and its backends' CPU by then.
   */
  traceFanOut?: boolean;
  /**
   * Also drain the backlog with one warm dispatcher: it first delivers this many events, is then
   * stopped (SIGSTOP) while the backlog is published and continued (SIGCONT). 0 skips it. @default 5000
   */
  warmUpEvents?: number;
  /**
   * The several-endpoints case: this many endpoints (on the same receiver, each with the cap) get every
   * event; one and two dispatchers drain it, against a raw durable loop at endpoints × cap connections.
   * @default 8; 0 or 1 skips it
   */
  endpoints?: number;
  /** Pending retries in the scheduler-pass measurement. @default 100000 */
  pendingRetries?: number;
  /** Run the (one) dispatcher under `node --cpu-prof`, writing its profile here. */
  cpuProfDir?: string;
  /**
   * Run the dispatchers as the container image does (`buildDispatcherImage`); without it, the TypeScript
   * sources under tsx, whose loader hooks and per-module transforms stay in the process.
   */
  dispatcherBuild?: DispatcherBuild;
  /** `WEBHOOK_ENDPOINT_CONCURRENCY` of the dispatchers. @default connections */
  endpointCap?: number;
  /** The latency trial: events/s published (one dispatcher), for this long. @default 1000 for 10 s; 0 skips it */
  steadyEventsPerSec?: number;
  steadyMs?: number;
  /**
   * Also run the steady trial the old way (NOTIFY in publishPost's statement, no Redis wake-up), for a
   * same-run comparison; `'first'` runs that one first (to tell an order effect from a difference).
   */
  steadyCompareNotify?: boolean | 'first';
  /** Run only the steady trial(s): no raw loops, backlogs or scheduler pass (≈ 20 s instead of ≈ 2 min). */
  steadyOnly?: boolean;
  /**
   * Extra environment for the dispatcher(s) and for the API that publishes their events (e.g. the OTEL_*
   * variables of the `tracing` scenario); the bench's own settings of either win over it.
   */
  heraldEnv?: Record<string, string>;
  log: (line: string) => void;
}

export interface RawLoopTrial {
  deliveriesPerSec: number;
  requests: number;
  receiverCounted: number;
  errors: number;
  p50Ms: number;
  p99Ms: number;
  /** Durable trials: the whole machine's busy CPU per delivery, every process (loop, receiver, PostgreSQL, other load). */
  machine?: MachineShare;
  /** Durable trials: bodies whose signature the receiver verified, and those it refused or saw twice. */
  verified?: number;
  invalid?: number;
}

/** The whole machine's CPU over a run: busy core-µs per delivery, and the busy share of all cores. */
export interface MachineShare {
  usPerDelivery: number;
  busyShare: number;
}

export interface DispatcherRun {
  status: 'ok' | 'incomplete' | 'not available yet' | 'failed' | 'skipped';
  reason?: string;
  /** Deliveries expected at the receiver (events × endpoints; with one endpoint, the events). */
  events?: number;
  /** Distinct events whose signature verified at the receiver. */
  verified?: number;
  invalid?: number;
  duplicate?: number;
  /** verified / (last delivery − first delivery). */
  deliveriesPerSec?: number;
  /** verified / (last delivery − dispatcher ready): includes the first poll and ramp-up. */
  endToEndPerSec?: number;
  cpuUsPerDelivery?: number;
  /** CPU of the PostgreSQL backends serving the dispatcher(s) (found by application_name), per delivery. */
  pgCpuUsPerDelivery?: number;
  /**
   * The whole machine from "ready" to the last poll: every process (dispatchers, PostgreSQL with its WAL
   * writer, Redis, the receiver, the bench, other load), per delivery, and how busy the cores were.
   */
  machine?: MachineShare;
  /**
   * Backlog runs: the same figures over the part of the backlog after the first {@link WARM_FRACTION} was
   * verified, i.e. a dispatcher past its start-up (JIT compilation, first connections, first claims cost a
   * fresh process 2–3× the CPU per delivery of a warm one; the raw loops' figures are warm trials).
   */
  warm?: {
    deliveries: number;
    deliveriesPerSec: number;
    cpuUsPerDelivery: number;
    pgCpuUsPerDelivery: number;
    queriesPerDelivery: number;
    machine: MachineShare;
  };
  /** Queries the dispatcher(s) sent (BEGIN/COMMIT/LISTEN included; each a round trip), per delivery. */
  queriesPerDelivery?: number;
  /** `WEBHOOK_ENDPOINT_CONCURRENCY` used. */
  endpointCap?: number;
  /** Latency trial only: publish → receiver, ms. */
  latency?: SteadyLatency;
  /**
   * FIFO runs: the outbox's events, checked against the receiver's first arrivals in `seq` order, and how
   * many arrived at another place than that order gives them, or not at all (one makes the run incomplete).
   */
  order?: { checked: number; misplaced: number };
  samples?: string[];
  /**
   * With duplicates: the first few, each with the receiver's arrivals (time, client port, signing
   * second) and what the database holds about the event's deliveries and attempts.
   */
  duplicates?: DuplicateEvidence[];
  /** Attempts the database recorded, and the failed ones by error (a failed attempt is retried: a duplicate if it had arrived). */
  attempts?: { total: number; failed: Record<string, number> };
}

export interface DuplicateEvidence extends DuplicateSample {
  deliveries: Array<{
    id: string;
    endpointId: string;
    status: string;
    attemptCount: number;
    attempts: Array<{ at: string; statusCode: number | null; durationMs: number | null; error: string | null }>;
  }>;
}

export interface SteadyLatency {
  eventsPerSec: number;
  published: number;
  /** publishPost calls that failed (not published, so not expected at the receiver). */
  publishFailed: number;
  /** Achieved publish rate (the statements answered in time?). */
  publishedPerSec: number;
  /** From publishPost's statement returning (after its commit) to the receiver: a lower bound. */
  fromCommit: { p50Ms: number; p99Ms: number; maxMs: number };
  /** From just before the publishPost statement was sent: an upper bound. */
  fromSend: { p50Ms: number; p99Ms: number; maxMs: number };
  /**
   * The publisher's own delays (absent before 2026-12-02): `late`, from each publish's scheduled time to its
   * call (the bench's event loop behind); `call`, from the call to its answer (waiting for one of the
   * publisher's pooled connections, the statement, the commit). Large values mean the trial was
   * publisher-bound: the dispatcher saw fewer events per second than asked.
   */
  publisher?: { late: Percentiles; call: Percentiles };
  /** Where the time goes, per delivery (from the database's timestamps; steady.ts's `steadyStages`). */
  stages?: SteadyStages;
  /**
   * commit → receiver by when the event was published: its first second (the dispatcher was just
   * started: JIT, first connections, first plans) and the rest, and the worst second's p99.
   */
  bySecond?: {
    firstSecond: Percentiles;
    afterFirstSecond: Percentiles;
    worstSecond: { second: number; p99Ms: number };
    /** p99 of each second, in order. */
    p99BySecond: number[];
  };
}

/**
 * The steady trial's commit → receiver time cut into stages, per delivery, from what the run leaves
 * behind (no instrumentation in the dispatcher): the delivery's `created_at` (the fan-out
 * statement's `now()`), the first attempt's `at` and `duration_ms` (the dispatcher's clock when it began
 * the POST, after the claim), the delivery's `updated_at` (the record statement's `now()`), and the
 * receiver's arrival. All clocks are this machine's.
 */
export interface SteadyStages {
  /** publishPost's commit → the fan-out statement that made its delivery (relay woken, pass started). */
  commitToFanOut: Percentiles;
  /** Fan-out → the POST began: XADD, XREADGROUP, waiting in the endpoint's lane for a slot, the claim. */
  fanOutToPost: Percentiles;
  /** The POST began → the receiver had it. */
  postToReceiver: Percentiles;
  /** The POST's own time (until the answer was read). */
  post: Percentiles;
  /** The answer → the record statement began (the batch's slower POSTs, then the statement's trip). */
  answerToRecord: Percentiles;
  /**
   * Share of the endpoint's slot-time (cap × the trial's span of POSTs) with a POST in flight: near 1
   * when the slots are the limit and always busy; low when they wait for the database between batches.
   */
  slotBusyShare: number;
}

export type Percentiles = { p50Ms: number; p99Ms: number; maxMs: number };

export interface WebhookResult {
  receiver: string;
  /**
   * What the dispatchers ran: `image`, the production build with its Dockerfile stage's node flags;
   * `source`, the TypeScript under tsx. Absent in results.json files written before the option (source).
   */
  dispatchers?: 'image' | 'source';
  rawLoop: { connections: number; trials: RawLoopTrial[]; deliveriesPerSec: Spread };
  /** Signs each body, POSTs at the same concurrency, records outcomes in INSERTs of 100 (null: no database). */
  durableLoop: { connections: number; trials: RawLoopTrial[]; deliveriesPerSec: Spread } | null;
  dispatcher: DispatcherRun;
  /**
   * The runs of one dispatcher from a new process after `dispatcher` ({@link WebhookConfig.newProcessRuns} − 1;
   * empty by default), each over the raw durable trials just before and after it. Absent in results.json files
   * written before the option existed (`--render` of an older run).
   */
  newProcessRepeats?: Array<{ run: DispatcherRun; beside: BesideRatio | null }>;
  /** The same backlog drained by one warm dispatcher process (null: skipped). */
  warmDispatcher: DispatcherRun | null;
  /** Events the warm dispatcher delivered before the backlog. */
  warmUpEvents: number;
  /** The warm dispatcher's deliveries/s over the raw durable loop's median. */
  warmDispatcherDurableRatio: number | null;
  /**
   * The one-dispatcher and warm runs over the raw durable loop's trials run just before and just after
   * each (null: not run): on a shared host whose speed drifts over minutes, the ratio least disturbed
   * by the drift; the trials also count in `durableLoop`.
   */
  beside: { dispatcher: BesideRatio | null; warm: BesideRatio | null };
  /** The same backlog drained by two dispatcher processes. */
  twoDispatchers: DispatcherRun | null;
  /** The same backlog to one FIFO endpoint, one dispatcher from a new process, its order checked. */
  fifoDispatcher?: DispatcherRun | null;
  /** Dispatcher deliveries/s over the raw loop's median; null when the dispatcher didn't run. */
  ratio: number | null;
  /** Dispatcher deliveries/s over the raw durable loop's median. */
  durableRatio: number | null;
  /** Two dispatchers over one. */
  twoOverOne: number | null;
  /** The same two ratios over the warm windows (see {@link DispatcherRun.warm}). */
  warmDurableRatio: number | null;
  warmTwoOverOne: number | null;
  /** The several-endpoints case (null: skipped). */
  multiEndpoint: MultiEndpointResult | null;
  /** One dispatcher at a steady publish rate: publishPost's commit → receiver. */
  steady: DispatcherRun | null;
  /** The same trial with publishPost's NOTIFY instead of the Redis wake-up (`steadyCompareNotify`). */
  steadyNotify: DispatcherRun | null;
  /** One due-scan pass (`queueDueDeliveries`) with 100,000 retries pending, none due. */
  schedulerPass: { pendingRetries: number; passMs: Spread } | null;
}

/** A dispatcher run over the mean of the raw durable loop's trials just before and after it. */
export interface BesideRatio {
  /** Deliveries/s of the trial before and of the trial after. */
  trials: [number, number];
  ratio: number;
}

/** `rate` over the mean of the two trials beside it; null when either is missing or the run has no rate. */
export function besideRatio(
  rate: number | undefined,
  before: number | undefined,
  after: number | undefined,
): BesideRatio | null {
  if (rate === undefined || before === undefined || after === undefined || before + after <= 0) return null;
  return { trials: [before, after], ratio: round(rate / ((before + after) / 2), 3) };
}

export interface MultiEndpointResult {
  endpoints: number;
  /** Deliveries in the backlog (events × endpoints). */
  deliveries: number;
  /** The raw durable loop at the dispatcher's total concurrency (endpoints × cap). */
  durableLoop: { connections: number; trials: RawLoopTrial[]; deliveriesPerSec: Spread } | null;
  dispatcher: DispatcherRun;
  twoDispatchers: DispatcherRun | null;
  durableRatio: number | null;
  twoOverOne: number | null;
  warmDurableRatio: number | null;
  warmTwoOverOne: number | null;
}

/** Backlog runs: the share of the backlog verified before the warm window starts. */
export const WARM_FRACTION = 0.3;
