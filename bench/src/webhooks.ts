import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, existsSync } from 'node:fs';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { webhookRedisKeys } from '@herald/contracts';
import { createDatabase, type HeraldDatabase, migrateToLatest } from '@herald/db';
import { connectOutboxWakePublisher, queueDueDeliveries } from '@herald/webhook-engine';
import { signWebhook } from '@herald/webhooks';
import { sql } from 'kysely';
import pg from 'pg';
import { publishPostWithWebhook } from '../../apps/api/src/post-published-webhook.js';
import {
  machineCpuSince,
  machineSample,
  procSample,
  ROOT,
  round,
  type Spread,
  sleep,
  spawnTracked,
  spread,
  stopChild,
  TSX_IMPORT,
  track,
  wallNow,
} from './common.js';
import type { LoopCommand, LoopResult } from './post-loop.js';
import { startHeraldTarget } from './targets.js';
import type { DuplicateSample, ReceiverStats } from './webhook-receiver.js';

const RECEIVER = fileURLToPath(new URL('./webhook-receiver.ts', import.meta.url));
const POST_LOOP = fileURLToPath(new URL('./post-loop.ts', import.meta.url));
/** Preloaded into the dispatcher: counts its PostgreSQL round trips. */
const QUERY_COUNTER = new URL('./pg-query-counter.ts', import.meta.url).href;
/** The dispatcher's entry point; the scenario runs only once it exists. */
export const DISPATCHER_MAIN = 'apps/webhook-dispatcher/src/main.ts';

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

/** Every attempt the run's database recorded, and the failed ones counted by error. */
/** Waits until no delivery is PENDING and no lane holds a slot (the engine has recorded everything). */
async function waitForIdleEngine(databaseUrl: string, deadline: number): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    for (;;) {
      const { rows } = await client.query<{ busy: boolean }>(
        `select exists (select 1 from webhook_deliveries where status = 'PENDING')
            or exists (select 1 from webhook_endpoint_slots where slots > 0 and leased_until > now()) as busy`,
      );
      if (!rows[0]?.busy) return;
      if (wallNow() > deadline) throw new Error('the warm-up left deliveries pending or slots held');
      await sleep(50);
    }
  } finally {
    await client.end().catch(() => {});
  }
}

async function countAttempts(databaseUrl: string): Promise<NonNullable<DispatcherRun['attempts']>> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ error: string | null; n: number }>(
      'select error, count(1)::int as n from webhook_attempts group by error',
    );
    const failed: Record<string, number> = {};
    for (const row of rows) if (row.error !== null) failed[row.error] = row.n;
    return { total: rows.reduce((sum, row) => sum + row.n, 0), failed };
  } finally {
    await client.end().catch(() => {});
  }
}

/** The database's view of duplicated events: their deliveries and every attempt recorded. */
async function explainDuplicates(
  databaseUrl: string,
  samples: readonly DuplicateSample[],
): Promise<DuplicateEvidence[]> {
  if (samples.length === 0) return [];
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const eventIds = samples.map((sample) => sample.key.split(' ').pop() ?? sample.key);
    const { rows } = await client.query<{
      event_id: string;
      id: string;
      endpoint_id: string;
      status: string;
      attempt_count: number;
      attempts: DuplicateEvidence['deliveries'][number]['attempts'] | null;
    }>(
      `select d.event_id, d.id, d.endpoint_id, d.status, d.attempt_count,
         (select json_agg(json_build_object('at', a.at, 'statusCode', a.status_code, 'durationMs', a.duration_ms,
            'error', a.error) order by a.at) from webhook_attempts a where a.delivery_id = d.id) as attempts
       from webhook_deliveries d where d.event_id = any($1::text[]) order by d.event_id, d.id`,
      [eventIds],
    );
    return samples.map((sample, index) => ({
      ...sample,
      deliveries: rows
        .filter((row) => row.event_id === eventIds[index])
        .map((row) => ({
          id: row.id,
          endpointId: row.endpoint_id,
          status: row.status,
          attemptCount: row.attempt_count,
          attempts: row.attempts ?? [],
        })),
    }));
  } finally {
    await client.end().catch(() => {});
  }
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
  /** Where the time goes, per delivery (from the database's timestamps; see {@link steadyStages}). */
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
 * behind (no instrumentation in the dispatcher): the outbox row's `dispatched_at` (the fan-out
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

type Percentiles = { p50Ms: number; p99Ms: number; maxMs: number };

export interface WebhookResult {
  receiver: string;
  rawLoop: { connections: number; trials: RawLoopTrial[]; deliveriesPerSec: Spread };
  /** Signs each body, POSTs at the same concurrency, records outcomes in INSERTs of 100 (null: no database). */
  durableLoop: { connections: number; trials: RawLoopTrial[]; deliveriesPerSec: Spread } | null;
  dispatcher: DispatcherRun;
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

interface IpcChild {
  child: ChildProcess;
  ask<T>(message: unknown): Promise<T>;
}

function forkChild(file: string): IpcChild {
  const child = track(
    fork(file, [], {
      cwd: ROOT,
      execArgv: ['--import', TSX_IMPORT],
      serialization: 'advanced',
      stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
    }),
  );
  let waiting: ((reply: any) => void) | undefined;
  child.on('message', (reply) => {
    const resolve = waiting;
    waiting = undefined;
    resolve?.(reply);
  });
  return {
    child,
    ask: (message) =>
      new Promise((resolve) => {
        waiting = resolve as (reply: any) => void;
        child.send(message as never);
      }),
  };
}

/** One Redis command over RESP, without a client library (PING, DEL). */
export function redisCommand(url: string, args: string[]): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port || 6379), hostname || '127.0.0.1');
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`redis ${args[0]}: timeout`));
    }, 3_000);
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    socket.once('data', (data) => {
      clearTimeout(timer);
      socket.end();
      resolve(data.toString('utf8').trim());
    });
    socket.write(`*${args.length}\r\n${args.map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`).join('')}`);
  });
}

export async function runWebhooks(config: WebhookConfig): Promise<WebhookResult> {
  const { log } = config;
  const receiver = forkChild(RECEIVER);
  const port = await new Promise<number>((resolve) => {
    let buffered = '';
    receiver.child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const match = /listening (\d+)/.exec(buffered);
      if (match) resolve(Number(match[1]));
    });
  });
  const origin = `http://127.0.0.1:${port}`;
  const loop = forkChild(POST_LOOP);
  try {
    // Raw keep-alive POST loop: the same kind of signed body, signed once.
    const secret = `whsec_${randomBytes(24).toString('base64url')}`;
    const eventId = `evt_${randomBytes(12).toString('hex')}`;
    const body = JSON.stringify({
      id: eventId,
      type: 'post.published',
      created: new Date().toISOString(),
      data: {
        id: '00000000-0000-4000-8000-000000000000',
        orgId: 'bench',
        title: 'Benchmark post: raw POST loop',
        tags: ['bench'],
        status: 'PUBLISHED',
        publishedAt: new Date().toISOString(),
        author: { id: 'bench-writer', name: 'Bench Writer' },
      },
    });
    const headers = signWebhook({ eventId, rawBody: body, secrets: [secret] });
    const trials: RawLoopTrial[] = [];
    const rawTrial = async () => {
      await receiver.ask({ type: 'reset' });
      const result = await loop.ask<LoopResult>({
        type: 'run',
        origin,
        path: '/raw',
        connections: config.connections,
        durationMs: config.trialMs,
        headers,
        body,
      } satisfies LoopCommand);
      const counted = await receiver.ask<ReceiverStats>({ type: 'stats' });
      trials.push({
        deliveriesPerSec: Math.round((result.requests / result.durationMs) * 1000),
        requests: result.requests,
        receiverCounted: counted.requests,
        errors: result.errors + result.non2xx,
        p50Ms: result.p50Ms,
        p99Ms: result.p99Ms,
      });
      log(
        `  raw POST loop ${trials.length}: ${trials.at(-1)!.deliveriesPerSec} POST/s (${config.connections} connections)`,
      );
    };
    const durableTrials: RawLoopTrial[] = [];
    const wideDurableTrials: RawLoopTrial[] = [];
    const endpoints = config.endpoints ?? 8;
    const endpointCap = config.endpointCap ?? config.connections;
    const durableTrial = async (connections = config.connections, into = durableTrials) => {
      if (!config.databaseUrl) return;
      // The receiver verifies and dedupes every signed body, as it does the dispatchers' deliveries:
      // the same receiver-side work (and CPU, on the same cores) for the baseline and for Herald.
      await receiver.ask({ type: 'reset', secret });
      const machine0 = machineSample();
      const result = await loop.ask<LoopResult>({
        type: 'run',
        origin,
        path: '/durable',
        connections,
        durationMs: config.trialMs,
        headers,
        body,
        durable: {
          databaseUrl: config.databaseUrl,
          schema: `bench_durable_${randomBytes(4).toString('hex')}`,
          secret,
        },
      } satisfies LoopCommand);
      // Includes the loop's set-up and drop of its table (a few ms of a trial of seconds).
      const machine = machineCpuSince(machine0, result.requests);
      const counted = await receiver.ask<ReceiverStats>({ type: 'stats' });
      into.push({
        deliveriesPerSec: Math.round((result.requests / result.durationMs) * 1000),
        requests: result.requests,
        receiverCounted: counted.requests,
        errors: result.errors + result.non2xx,
        p50Ms: result.p50Ms,
        p99Ms: result.p99Ms,
        machine: { usPerDelivery: machine.usPerUnit, busyShare: machine.busyShare },
        verified: counted.verified,
        invalid: counted.invalid + counted.duplicate,
      });
      log(
        `  raw durable loop ${into.length} (${connections} connections): ${into.at(-1)!.deliveriesPerSec} deliveries/s recorded`,
      );
    };
    const only = config.steadyOnly === true;
    const multi = endpoints > 1 && !only;
    const skipped: DispatcherRun = { status: 'skipped', reason: 'steady trial only' };
    // Raw trials before and after the dispatcher's run, so both see about the same background load.
    const before = only ? 0 : Math.ceil(config.trials / 2);
    for (let trial = 0; trial < before; trial++) {
      await rawTrial();
      await durableTrial();
      if (multi) await durableTrial(endpoints * endpointCap, wideDurableTrials);
    }
    // A durable trial right before and right after each of the two single-dispatcher backlog runs
    // (the last one before doubles as the first run's "before", the one between them serves both).
    const lastDurable = () => (before > 0 ? durableTrials.at(-1)?.deliveriesPerSec : undefined);
    const beforeDispatcher = lastDurable();
    const dispatcher = only ? skipped : await runDispatcher(config, receiver, origin, 1);
    if (!only && before > 0) await durableTrial();
    const afterDispatcher = lastDurable();
    const warmUpEvents = config.warmUpEvents ?? 5000;
    const warmDispatcher =
      only || warmUpEvents <= 0
        ? null
        : await runDispatcher(config, receiver, origin, 1, 'backlog', 1, config.dispatcherEvents, false, warmUpEvents);
    if (warmDispatcher && before > 0) await durableTrial();
    const afterWarm = warmDispatcher ? lastDurable() : undefined;
    const twoDispatchers =
      config.twoDispatchers === false || only ? null : await runDispatcher(config, receiver, origin, 2);
    // Several endpoints: the same number of deliveries, twice over (events × endpoints).
    const multiEvents = Math.max(1, Math.round((config.dispatcherEvents * 2) / endpoints));
    const multiOne = multi ? await runDispatcher(config, receiver, origin, 1, 'backlog', endpoints, multiEvents) : null;
    const multiTwo =
      multi && config.twoDispatchers !== false
        ? await runDispatcher(config, receiver, origin, 2, 'backlog', endpoints, multiEvents)
        : null;
    const steadyOn = (config.steadyEventsPerSec ?? 1000) > 0;
    const notifyTrial = () =>
      steadyOn && config.steadyCompareNotify
        ? runDispatcher(config, receiver, origin, 1, 'steady', 1, config.dispatcherEvents, true)
        : Promise.resolve(null);
    const notifyFirst = config.steadyCompareNotify === 'first' ? await notifyTrial() : null;
    const steady = steadyOn ? await runDispatcher(config, receiver, origin, 1, 'steady') : null;
    const steadyNotify = config.steadyCompareNotify === 'first' ? notifyFirst : await notifyTrial();
    for (const [label, run] of [
      ['steady', steady],
      ['steady with NOTIFY', steadyNotify],
    ] as const) {
      if (run?.latency) {
        const l = run.latency;
        log(
          `  ${label} ${l.eventsPerSec} events/s (${l.publishedPerSec} achieved): commit → receiver p50 ${l.fromCommit.p50Ms} ms, p99 ${l.fromCommit.p99Ms} ms`,
        );
      } else if (run) log(`  ${label}: ${run.status} ${run.reason ?? ''}`);
    }
    for (let trial = before; trial < (only ? 0 : config.trials); trial++) {
      await rawTrial();
      await durableTrial();
      if (multi) await durableTrial(endpoints * endpointCap, wideDurableTrials);
    }
    const wideDurable =
      wideDurableTrials.length > 0
        ? {
            connections: endpoints * endpointCap,
            trials: wideDurableTrials,
            deliveriesPerSec: spread(wideDurableTrials.map((trial) => trial.deliveriesPerSec)),
          }
        : null;
    const multiEndpoint: MultiEndpointResult | null =
      multi && multiOne
        ? {
            endpoints,
            deliveries: multiEvents * endpoints,
            durableLoop: wideDurable,
            dispatcher: multiOne,
            twoDispatchers: multiTwo,
            durableRatio:
              multiOne.deliveriesPerSec !== undefined && wideDurable
                ? round(multiOne.deliveriesPerSec / wideDurable.deliveriesPerSec.median, 3)
                : null,
            twoOverOne:
              multiTwo?.deliveriesPerSec !== undefined && multiOne.deliveriesPerSec
                ? round(multiTwo.deliveriesPerSec / multiOne.deliveriesPerSec, 3)
                : null,
            ...warmRatios(multiOne, multiTwo, wideDurable?.deliveriesPerSec.median),
          }
        : null;
    if (multiEndpoint)
      log(
        `  ${endpoints} endpoints: one dispatcher ${multiOne?.deliveriesPerSec ?? '–'}/s (${multiEndpoint.durableRatio ?? '–'}× raw durable at ${endpoints * endpointCap} connections), two ${multiTwo?.deliveriesPerSec ?? '–'}/s (${multiEndpoint.twoOverOne ?? '–'}× one)`,
      );
    const rawLoop = {
      connections: config.connections,
      trials,
      deliveriesPerSec: spread(trials.map((trial) => trial.deliveriesPerSec)),
    };
    const durableLoop =
      durableTrials.length > 0
        ? {
            connections: config.connections,
            trials: durableTrials,
            deliveriesPerSec: spread(durableTrials.map((trial) => trial.deliveriesPerSec)),
          }
        : null;
    const schedulerPass =
      config.databaseUrl && !only
        ? await measureSchedulerPass(config.databaseUrl, config.pendingRetries ?? 100_000).catch((error: unknown) => {
            log(`  scheduler pass: failed (${(error as Error).message})`);
            return null;
          })
        : null;
    if (schedulerPass)
      log(`  scheduler pass with ${schedulerPass.pendingRetries} pending retries: ${schedulerPass.passMs.median} ms`);

    if (dispatcher.status === 'ok' || dispatcher.status === 'incomplete') {
      log(
        `  dispatcher: ${dispatcher.deliveriesPerSec} signed deliveries/s (${dispatcher.verified}/${dispatcher.events})`,
      );
    } else {
      log(`  dispatcher: ${dispatcher.status}${dispatcher.reason ? ` (${dispatcher.reason})` : ''}`);
    }
    return {
      receiver:
        'node:http in its own process, 200 as soon as the body has arrived; verifies signatures and dedupes after answering',
      rawLoop,
      durableLoop,
      dispatcher,
      warmDispatcher,
      warmUpEvents,
      warmDispatcherDurableRatio:
        warmDispatcher?.deliveriesPerSec !== undefined && durableLoop
          ? round(warmDispatcher.deliveriesPerSec / durableLoop.deliveriesPerSec.median, 3)
          : null,
      beside: {
        dispatcher: besideRatio(dispatcher.deliveriesPerSec, beforeDispatcher, afterDispatcher),
        warm: besideRatio(warmDispatcher?.deliveriesPerSec, afterDispatcher, afterWarm),
      },
      twoDispatchers,
      steady,
      steadyNotify,
      ratio:
        dispatcher.deliveriesPerSec !== undefined
          ? round(dispatcher.deliveriesPerSec / rawLoop.deliveriesPerSec.median, 3)
          : null,
      durableRatio:
        dispatcher.deliveriesPerSec !== undefined && durableLoop
          ? round(dispatcher.deliveriesPerSec / durableLoop.deliveriesPerSec.median, 3)
          : null,
      twoOverOne:
        twoDispatchers?.deliveriesPerSec !== undefined && dispatcher.deliveriesPerSec
          ? round(twoDispatchers.deliveriesPerSec / dispatcher.deliveriesPerSec, 3)
          : null,
      ...warmRatios(dispatcher, twoDispatchers, durableLoop?.deliveriesPerSec.median),
      multiEndpoint,
      schedulerPass,
    };
  } finally {
    await Promise.all([stopChild(receiver.child), stopChild(loop.child)]);
  }
}

/** One dispatcher's warm rate over the raw durable loop's, and two dispatchers' warm rate over one's. */
function warmRatios(
  one: DispatcherRun,
  two: DispatcherRun | null,
  durableMedian: number | undefined,
): { warmDurableRatio: number | null; warmTwoOverOne: number | null } {
  const oneRate = one.warm?.deliveriesPerSec;
  const twoRate = two?.warm?.deliveriesPerSec;
  return {
    warmDurableRatio: oneRate && durableMedian ? round(oneRate / durableMedian, 3) : null,
    warmTwoOverOne: oneRate && twoRate ? round(twoRate / oneRate, 3) : null,
  };
}

/** The raw durable loop's trials: the whole machine's CPU per delivery and how busy its cores were (medians). */
function machineText(trials: readonly RawLoopTrial[]): string {
  const shares = trials.flatMap((trial) => (trial.machine ? [trial.machine] : []));
  if (shares.length === 0) return 'machine CPU not measured';
  const us = spread(shares.map((one) => one.usPerDelivery)).median;
  const busy = spread(shares.map((one) => one.busyShare)).median;
  return `whole machine ${num(us)} µs CPU per delivery, cores ${num(busy * 100)} % busy`;
}

/** The raw durable loop's trials: what the receiver verified of what the loop sent, all trials together. */
function verifiedText(trials: readonly RawLoopTrial[]): string {
  if (trials.some((trial) => trial.verified === undefined)) return 'not verified at the receiver';
  const sent = trials.reduce((sum, trial) => sum + trial.requests, 0);
  const verified = trials.reduce((sum, trial) => sum + (trial.verified ?? 0), 0);
  const invalid = trials.reduce((sum, trial) => sum + (trial.invalid ?? 0), 0);
  return `receiver verified ${num(verified)} of ${num(sent)} answered (${num(invalid)} invalid or duplicate)`;
}

/** "whole machine …" for a dispatcher run (or its warm window). */
function machineRunText(machine: MachineShare | undefined): string {
  return machine
    ? `whole machine ${num(machine.usPerDelivery)} µs CPU per delivery (every process), cores ${num(machine.busyShare * 100)} % busy`
    : 'whole machine not measured';
}

/** "past start-up: …" for a backlog run with a warm window. */
function warmText(run: DispatcherRun | null | undefined): string {
  const w = run?.warm;
  if (!w) return 'past start-up: not measured';
  return `past start-up (the last ${num(w.deliveries)} deliveries, after the first ${Math.round(WARM_FRACTION * 100)} % of the backlog): ${num(w.deliveriesPerSec)}/s, ${num(w.cpuUsPerDelivery)} µs dispatcher CPU, ${num(w.pgCpuUsPerDelivery)} µs PostgreSQL CPU, ${num(w.queriesPerDelivery, 3)} round trips per delivery, ${machineRunText(w.machine)}`;
}

async function runDispatcher(
  config: WebhookConfig,
  receiver: IpcChild,
  origin: string,
  processes: number,
  mode: 'backlog' | 'steady' = 'backlog',
  /** Endpoints (on the same receiver, paths /hook/0…) that get every event. */
  endpointCount = 1,
  /** Events in the backlog. @default config.dispatcherEvents */
  backlogEvents = config.dispatcherEvents,
  /** Steady mode: publishPost sends its NOTIFY (single mode's path) instead of the Redis wake-up. */
  steadyNotify = false,
  /** Backlog mode: warm the dispatchers with this many events first (see {@link WebhookConfig.warmUpEvents}). */
  warmUpEvents = 0,
): Promise<DispatcherRun> {
  if (!existsSync(`${ROOT}${DISPATCHER_MAIN}`)) {
    return { status: 'not available yet', reason: `${DISPATCHER_MAIN} does not exist in this tree` };
  }
  if (!config.databaseUrl || !config.redisUrl) {
    return { status: 'skipped', reason: 'the dispatcher needs DATABASE_URL and REDIS_URL' };
  }
  const { log } = config;
  const prefix = `herald-bench-${randomBytes(4).toString('hex')}:`;
  let herald: Awaited<ReturnType<typeof startHeraldTarget>> | undefined;
  const dispatchers: ChildProcess[] = [];
  const endpointCap = config.endpointCap ?? config.connections;
  const applicationName = `herald-bench-dispatcher-${randomBytes(4).toString('hex')}`;
  let monitor: pg.Client | undefined;
  let publisher: HeraldDatabase | undefined;
  let wake: ReturnType<typeof connectOutboxWakePublisher> | undefined;
  try {
    herald = await startHeraldTarget({
      pods: 1,
      pubsub: 'redis',
      databaseUrl: config.databaseUrl,
      redisUrl: config.redisUrl,
      database: 'postgres',
      env: { WEBHOOK_ALLOW_PRIVATE_URLS: 'true', HERALD_REDIS_PREFIX: prefix },
      label: 'webhook setup',
    });
    const secrets: Record<string, string> = {};
    for (let i = 0; i < endpointCount; i++) {
      const path = endpointCount === 1 ? '/hook' : `/hook/${i}`;
      const created = await herald.graphql(
        'mutation Endpoint($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } secret } }',
        { input: { orgId: herald.orgId, url: `${origin}${path}`, eventTypes: ['post.published'] } },
      );
      secrets[path] = created.createWebhookEndpoint.secret;
    }
    await receiver.ask(
      endpointCount === 1
        ? { type: 'reset', secret: secrets['/hook'], track: mode === 'steady' }
        : { type: 'reset', secrets, track: mode === 'steady' },
    );

    const steadyRate = config.steadyEventsPerSec ?? 1000;
    const steadyMs = config.steadyMs ?? 10_000;
    const events = await herald.prepareEvents(
      mode === 'steady' ? Math.round((steadyRate * steadyMs) / 1000) : backlogEvents,
    );
    /** Deliveries the receiver must verify: every event at every endpoint. */
    const expected = events.length * endpointCount;
    const warming = mode === 'backlog' && warmUpEvents > 0;
    const warmUp = warming ? await herald.prepareEvents(warmUpEvents) : [];
    const publishAll = async (posts: typeof events) => {
      let next = 0;
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          while (next < posts.length) await herald!.publish(posts[next++]!);
        }),
      );
    };
    const publishBacklog = async () => {
      // The backlog: every event is in the outbox before the dispatcher starts (or continues).
      const t0 = wallNow();
      await publishAll(events);
      log(
        `  published ${events.length} posts (the dispatcher's backlog, ${expected} deliveries to ${endpointCount} endpoint${endpointCount === 1 ? '' : 's'}) in ${Math.round(wallNow() - t0)} ms`,
      );
    };
    if (mode === 'backlog' && !warming) await publishBacklog();
    const dispatcherUrl = new URL(herald.env.DATABASE_URL!);
    const encryptionKeys = herald.env.HERALD_ENCRYPTION_KEYS!;
    dispatcherUrl.searchParams.set('application_name', applicationName);
    monitor = new pg.Client({ connectionString: config.databaseUrl });
    await monitor.connect();
    const queryCounts = new Map<ChildProcess, number>();
    /**
     * Each dispatcher's count as of its "ready" line (the counter's lines and the log share stdout, so
     * this is its start-up: migrations check, consumer group). A small backlog can be drained within
     * moments of "ready", so the baseline is taken here rather than after a pause.
     */
    const readyCounts = new Map<ChildProcess, number>();

    const output: string[] = [];
    const startOne = (): { child: ChildProcess; ready: Promise<number> } => {
      const profArgs = config.cpuProfDir && processes === 1 ? ['--cpu-prof', '--cpu-prof-dir', config.cpuProfDir] : [];
      // Diagnostics: extra node flags for the dispatchers (e.g. BENCH_DISPATCHER_NODE_FLAGS=--max-semi-space-size=4).
      const nodeFlags = (process.env.BENCH_DISPATCHER_NODE_FLAGS ?? '').split(' ').filter(Boolean);
      const child = spawnTracked(
        process.execPath,
        [
          ...nodeFlags,
          ...profArgs,
          '--import',
          TSX_IMPORT,
          '--import',
          QUERY_COUNTER,

          DISPATCHER_MAIN,
        ],
        {
          cwd: ROOT,
          env: {
            PATH: process.env.PATH ?? '',
            ...(process.env.BENCH_PG_QUERY_LOG ? { BENCH_PG_QUERY_LOG: process.env.BENCH_PG_QUERY_LOG } : {}),
            NODE_ENV: 'production',

            LOG_LEVEL: process.env.BENCH_DISPATCHER_LOG_LEVEL ?? 'info',
            HOST: '127.0.0.1',
            PORT: '0',
            DATABASE_URL: dispatcherUrl.toString(),
            REDIS_URL: config.redisUrl!,
            HERALD_REDIS_PREFIX: prefix,
            // The API's keyring: the dispatcher opens the secrets the API sealed.
            HERALD_ENCRYPTION_KEYS: encryptionKeys,
            WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
            // The same concurrency as the raw loops: this many requests in flight to the one endpoint.
            WEBHOOK_ENDPOINT_CONCURRENCY: String(endpointCap),
            ...(process.env.BENCH_WEBHOOK_CONCURRENCY
              ? { WEBHOOK_CONCURRENCY: process.env.BENCH_WEBHOOK_CONCURRENCY }
              : {}),
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      dispatchers.push(child);
      const ready = new Promise<number>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`not ready in 60 s: ${output.slice(-5).join(' ')}`)), 60_000);
        let buffered = '';
        child.stderr?.setEncoding('utf8').on('data', (chunk: string) => output.push(chunk));
        child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
          buffered += chunk;
          const lines = buffered.split('\n');
          buffered = lines.pop() ?? '';
          for (const line of lines) {
            const counted = /^pg-queries (\d+)$/.exec(line);
            if (counted) {
              queryCounts.set(child, Number(counted[1]));
              continue;
            }
            output.push(line);
            if (process.env.BENCH_DISPATCHER_LOG) appendFileSync(process.env.BENCH_DISPATCHER_LOG, `${line}\n`);
            if (output.length > 40) output.shift();
            if (line.includes('herald webhook dispatcher ready')) {
              readyCounts.set(child, queryCounts.get(child) ?? 0);
              clearTimeout(timer);
              resolve(wallNow());
            }
          }
        });
        child.once('exit', (code) => {
          clearTimeout(timer);
          reject(new Error(`exited with ${code}: ${output.slice(-5).join(' ')}`));
        });
      });
      return { child, ready };
    };
    const started = Array.from({ length: processes }, startOne);
    let ready = Math.max(...(await Promise.all(started.map((one) => one.ready))));
    const child = started[0]!.child;
    if (warming) {
      // Warm: deliver the warm-up events, stop the dispatchers while the backlog is published, continue
      // them. Their code is compiled, their connections open; they find the backlog as a fresh one would.
      await publishAll(warmUp);
      const warmUpDeadline = wallNow() + config.dispatcherTimeoutMs;
      while ((await receiver.ask<ReceiverStats>({ type: 'stats' })).verified < warmUp.length * endpointCount) {
        if (wallNow() > warmUpDeadline) throw new Error(`the warm-up's ${warmUp.length} events were not delivered`);
        await sleep(100);
      }
      // Stopped only once every warm-up delivery is recorded and no lane holds a slot: nothing is leased
      // or in flight while it is stopped, so nothing of the warm-up is sent again after the reset below.
      await waitForIdleEngine(herald.env.DATABASE_URL!, warmUpDeadline);
      for (const one of started) one.child.kill('SIGSTOP');
      try {
        await publishBacklog();
        await receiver.ask(
          endpointCount === 1 ? { type: 'reset', secret: secrets['/hook'] } : { type: 'reset', secrets },
        );
      } finally {
        for (const one of started) one.child.kill('SIGCONT');
      }
      ready = wallNow();
      // The warm-up's queries are not the backlog's: count from here (the counter prints every 100 ms).
      for (const one of started) readyCounts.set(one.child, queryCounts.get(one.child) ?? 0);
    }
    const cpuNow = () => started.reduce((sum, one) => sum + procSample(one.child.pid!).cpuUs, 0);
    // PostgreSQL backends serving the dispatchers: CPU first seen and last seen, per backend.
    const backends = new Map<number, { first: number; last: number }>();
    const sampleBackends = async (initial: boolean) => {
      const { rows } = await monitor!.query<{ pid: number }>(
        'select pid from pg_stat_activity where application_name = $1',
        [applicationName],
      );
      for (const { pid } of rows) {
        let cpu: number;
        try {
          cpu = procSample(pid).cpuUs;
        } catch {
          continue;
        }
        const seen = backends.get(pid);
        if (seen) seen.last = cpu;
        else backends.set(pid, { first: initial ? cpu : 0, last: cpu });
      }
    };
    const queriesNow = () => [...queryCounts.values()].reduce((sum, n) => sum + n, 0);
    const queries0 = [...readyCounts.values()].reduce((sum, n) => sum + n, 0);
    const cpu0 = cpuNow();
    const machine0 = machineSample();
    await sampleBackends(true);
    let publishing: Promise<SteadyPublish> | undefined;
    if (mode === 'steady') {
      publisher = await createDatabase({ kind: 'postgres', url: herald.env.DATABASE_URL!, poolMax: 16 });
      // Cluster mode's path, as the API's resolver takes it: publishPost without NOTIFY, then the
      // dispatchers woken through Redis after the commit.
      wake = connectOutboxWakePublisher(config.redisUrl, webhookRedisKeys(prefix).outboxWakeChannel);
      publishing = publishSteadily(publisher, herald.orgId, events, steadyRate, steadyNotify ? undefined : wake);
    }
    const pgCpuNow = () => [...backends.values()].reduce((sum, one) => sum + (one.last - one.first), 0);
    /** Where the warm window starts (backlog runs): the figures as of that poll. */
    let warmMark:
      | {
          at: number;
          verified: number;
          cpuUs: number;
          pgCpuUs: number;
          queries: number;
          machine: ReturnType<typeof machineSample>;
        }
      | undefined;
    let stats = await receiver.ask<ReceiverStats>({ type: 'stats' });
    let lastProgress = wallNow();
    let lastVerified = 0;
    let publishFailed = 0;
    void publishing?.then((done) => {
      publishFailed = done.failed;
    });
    while (
      stats.verified < expected - publishFailed * endpointCount &&
      wallNow() - ready < config.dispatcherTimeoutMs + steadyMs
    ) {
      // Near the end, look more often: the CPU windows end at the poll that sees the last delivery.
      await sleep(stats.verified >= expected * 0.9 ? 20 : 100);
      await sampleBackends(false).catch(() => {});
      if (child.exitCode !== null) break;
      stats = await receiver.ask<ReceiverStats>({ type: 'stats' });
      if (mode === 'backlog' && warmMark === undefined && stats.verified >= expected * WARM_FRACTION) {
        warmMark = {
          at: wallNow(),
          verified: stats.verified,
          cpuUs: cpuNow(),
          pgCpuUs: pgCpuNow(),
          queries: queriesNow(),
          machine: machineSample(),
        };
      }
      if (stats.verified > lastVerified) {
        lastVerified = stats.verified;
        lastProgress = wallNow();
      } else if (wallNow() - lastProgress > 15_000) {
        break;
      }
    }
    const cpuUs = started.every((one) => one.child.exitCode === null) ? cpuNow() - cpu0 : Number.NaN;
    const machine = machineCpuSince(machine0, stats.verified);
    const warmMachine = warmMark ? machineCpuSince(warmMark.machine, stats.verified - warmMark.verified) : undefined;
    await sampleBackends(false).catch(() => {});
    await sleep(150);
    const queries = queriesNow() - queries0;
    const pgCpuUs = pgCpuNow();
    const span = stats.lastAt - stats.firstAt;
    const warmDeliveries = warmMark ? stats.verified - warmMark.verified : 0;
    const warm =
      warmMark && warmDeliveries > 0 && stats.lastAt > warmMark.at && Number.isFinite(cpuUs)
        ? {
            deliveries: warmDeliveries,
            deliveriesPerSec: Math.round((warmDeliveries / (stats.lastAt - warmMark.at)) * 1000),
            cpuUsPerDelivery: round((cpuUs - (warmMark.cpuUs - cpu0)) / warmDeliveries, 1),
            pgCpuUsPerDelivery: round((pgCpuUs - warmMark.pgCpuUs) / warmDeliveries, 1),
            queriesPerDelivery: round((queries - (warmMark.queries - queries0)) / warmDeliveries, 3),
            machine: { usPerDelivery: warmMachine!.usPerUnit, busyShare: warmMachine!.busyShare },
          }
        : undefined;
    let latency: SteadyLatency | undefined;
    if (publishing) {
      const published = await publishing;
      const { arrivals } = await receiver.ask<{ arrivals: Array<[string, number]> }>({ type: 'arrivals' });
      const arrived = new Map(arrivals);
      const fromCommit: number[] = [];
      const fromSend: number[] = [];
      const seconds: number[][] = [];
      const firstSent = published.times[0]?.sentAt ?? 0;
      for (const one of published.times) {
        const at = arrived.get(one.postId);
        if (at === undefined) continue;
        fromCommit.push(at - one.committedAt);
        fromSend.push(at - one.sentAt);
        const second = Math.floor((one.sentAt - firstSent) / 1000);
        const inSecond = seconds[second] ?? [];
        seconds[second] = inSecond;
        inSecond.push(at - one.committedAt);
      }
      const worst = seconds
        .map((values, second) => ({ second, p99Ms: percentiles(values ?? []).p99Ms }))
        .filter((one) => Number.isFinite(one.p99Ms))
        .reduce((a, b) => (b.p99Ms > a.p99Ms ? b : a), { second: -1, p99Ms: Number.NEGATIVE_INFINITY });
      latency = {
        eventsPerSec: steadyRate,
        published: published.times.length,
        publishFailed: published.failed,
        publishedPerSec: Math.round((published.times.length / published.durationMs) * 1000),
        fromCommit: percentiles(fromCommit),
        fromSend: percentiles(fromSend),
        bySecond: {
          firstSecond: percentiles(seconds[0] ?? []),
          afterFirstSecond: percentiles(seconds.slice(1).flatMap((values) => values ?? [])),
          worstSecond: worst,
          p99BySecond: Array.from(seconds, (values) => percentiles(values ?? []).p99Ms),
        },
        stages: await steadyStages(herald.env.DATABASE_URL!, published.times, arrived, endpointCap).catch(
          () => undefined,
        ),
      };
    }
    return {
      status: stats.verified >= expected ? 'ok' : 'incomplete',
      ...(stats.verified < expected
        ? { reason: `${stats.verified} of ${expected} delivered before giving up; ${output.slice(-3).join(' ')}` }
        : {}),
      events: expected,
      verified: stats.verified,
      invalid: stats.invalid,
      duplicate: stats.duplicate,
      deliveriesPerSec: span > 0 ? Math.round((stats.verified / span) * 1000) : 0,
      endToEndPerSec: Math.round((stats.verified / (stats.lastAt - ready)) * 1000),
      cpuUsPerDelivery: round(cpuUs / Math.max(1, stats.verified), 1),
      pgCpuUsPerDelivery: round(pgCpuUs / Math.max(1, stats.verified), 1),
      machine: { usPerDelivery: machine.usPerUnit, busyShare: machine.busyShare },
      queriesPerDelivery: round(queries / Math.max(1, stats.verified), 3),
      ...(warm ? { warm } : {}),
      endpointCap,
      ...(latency ? { latency } : {}),
      samples: stats.invalidSamples,
      attempts: await countAttempts(herald.env.DATABASE_URL!).catch(() => undefined),
      ...(stats.duplicate > 0
        ? {
            duplicates: await explainDuplicates(herald.env.DATABASE_URL!, stats.duplicateSamples).catch(
              (error: unknown) =>
                stats.duplicateSamples.map((sample) => ({
                  ...sample,
                  deliveries: [],
                  error: (error as Error).message,
                })),
            ),
          }
        : {}),
    };
  } catch (error) {
    return { status: 'failed', reason: (error as Error).message.slice(0, 500) };
  } finally {
    await Promise.all(dispatchers.map((child) => stopChild(child)));
    await monitor?.end().catch(() => {});
    await publisher?.close().catch(() => {});
    await wake?.close();
    await herald?.stop();
    const keys = webhookRedisKeys(prefix);
    if (config.redisUrl)
      await redisCommand(config.redisUrl, ['DEL', keys.workStream, keys.deadLetterStream, keys.parkedStream]).catch(
        () => {},
      );
  }
}

interface SteadyPublish {
  durationMs: number;
  /** publishPost calls that failed (e.g. no pooled connection in time): not counted anywhere else. */
  failed: number;
  times: Array<{ postId: string; sentAt: number; committedAt: number }>;
}

/**
 * Publishes the drafts at a steady rate (open loop: each at its scheduled time, whatever the previous
 * ones are doing) through the API's own one-statement publishPost (`publishPostWithWebhook`: the post
 * and its outbox row commit together), called directly so the API's HTTP and GraphQL layers (priced
 * elsewhere) do not limit the rate. As in the API's cluster mode, the statement sends no NOTIFY and the
 * dispatchers are woken through Redis after the commit. `committedAt` is when the statement answered.
 */
async function publishSteadily(
  database: HeraldDatabase,
  orgId: string,
  events: readonly { postId: string }[],
  perSec: number,
  /** Cluster mode's Redis wake-up; without it, the statement sends the NOTIFY (single mode). */
  wake: { wake(): void } | undefined,
): Promise<SteadyPublish> {
  const times: SteadyPublish['times'] = [];
  let failed = 0;
  const start = wallNow();
  const inFlight = new Set<Promise<void>>();
  for (let i = 0; i < events.length; i++) {
    const due = start + (i * 1000) / perSec;
    const wait = due - wallNow();
    if (wait > 1) await sleep(wait);
    const postId = events[i]!.postId;
    const one = (async () => {
      const sentAt = wallNow();
      try {
        const published = await publishPostWithWebhook(database.db, postId, [orgId], { notify: !wake });
        if (published) {
          times.push({ postId, sentAt, committedAt: wallNow() });
          wake?.wake();
        } else failed++;
      } catch {
        failed++;
      }
    })();
    inFlight.add(one);
    void one.finally(() => inFlight.delete(one));
  }
  await Promise.all([...inFlight]);
  return { durationMs: wallNow() - start, times, failed };
}

/** One line: each stage's p50 / p99, and how busy the endpoint's slots were. */
function stagesLine(stages: SteadyStages): string {
  const one = (label: string, value: Percentiles) => `${label} ${round(value.p50Ms, 1)} / ${round(value.p99Ms, 1)}`;
  return `stages, p50 / p99 ms per delivery: ${[
    one('commit → fan-out', stages.commitToFanOut),
    one('fan-out → POST began (stream, lane wait, claim)', stages.fanOutToPost),
    one('POST', stages.post),
    one('POST began → receiver', stages.postToReceiver),
    one('answer → record began', stages.answerToRecord),
  ].join('; ')}; the endpoint's slots had a POST in flight ${round(stages.slotBusyShare * 100, 0)} % of the time`;
}

/** {@link SteadyStages} of a steady trial, from its database (one endpoint). */
async function steadyStages(
  databaseUrl: string,
  times: SteadyPublish['times'],
  arrived: ReadonlyMap<string, number>,
  endpointCap: number,
): Promise<SteadyStages> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{
      post_id: string;
      fanned_out: number;
      post_at: number;
      post_ms: number;
      recorded: number;
    }>(`
      select event.body::json->'data'->>'id' as post_id,
        extract(epoch from event.dispatched_at) * 1000 as fanned_out,
        extract(epoch from attempt.at) * 1000 as post_at, attempt.duration_ms as post_ms,
        extract(epoch from delivery.updated_at) * 1000 as recorded
      from webhook_outbox event
      join webhook_deliveries delivery on delivery.event_id = event.id
      cross join lateral (
        select at, duration_ms from webhook_attempts where delivery_id = delivery.id order by at limit 1
      ) attempt
      where event.type = 'post.published'
    `);
    const committed = new Map(times.map((one) => [one.postId, one.committedAt]));
    const stage = {
      commitToFanOut: [] as number[],
      fanOutToPost: [] as number[],
      postToReceiver: [] as number[],
      post: [] as number[],
      answerToRecord: [] as number[],
    };
    let firstPost = Number.POSITIVE_INFINITY;
    let lastAnswer = 0;
    let busy = 0;
    for (const row of rows) {
      const commit = committed.get(row.post_id);
      const arrival = arrived.get(row.post_id);
      const [fannedOut, postAt, postMs, recorded] = [row.fanned_out, row.post_at, row.post_ms, row.recorded].map(
        Number,
      );
      if (commit === undefined || arrival === undefined) continue;
      stage.commitToFanOut.push(fannedOut! - commit);
      stage.fanOutToPost.push(postAt! - fannedOut!);
      stage.postToReceiver.push(arrival - postAt!);
      stage.post.push(postMs!);
      stage.answerToRecord.push(recorded! - (postAt! + postMs!));
      firstPost = Math.min(firstPost, postAt!);
      lastAnswer = Math.max(lastAnswer, postAt! + postMs!);
      busy += postMs!;
    }
    return {
      commitToFanOut: percentiles(stage.commitToFanOut),
      fanOutToPost: percentiles(stage.fanOutToPost),
      postToReceiver: percentiles(stage.postToReceiver),
      post: percentiles(stage.post),
      answerToRecord: percentiles(stage.answerToRecord),
      slotBusyShare: round(busy / Math.max(1, endpointCap * (lastAnswer - firstPost)), 3),
    };
  } finally {
    await client.end().catch(() => {});
  }
}

function percentiles(values: number[]): Percentiles {
  if (values.length === 0) return { p50Ms: Number.NaN, p99Ms: Number.NaN, maxMs: Number.NaN };
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!, 1);
  return { p50Ms: at(0.5), p99Ms: at(0.99), maxMs: round(sorted.at(-1)!, 1) };
}

/**
 * The due scan's cost with a large retry backlog: 100,000 PENDING deliveries waiting for a retry (none
 * due), then `queueDueDeliveries` timed a few times. It walks the index on `next_attempt_at` with a
 * LIMIT, so it should cost about the same as with an empty table.
 */
async function measureSchedulerPass(
  databaseUrl: string,
  pendingRetries: number,
): Promise<{ pendingRetries: number; passMs: Spread }> {
  const schema = `bench_sched_${randomBytes(4).toString('hex')}`;
  const url = new URL(databaseUrl);
  url.searchParams.set('options', `-c search_path=${schema}`);
  const admin = await createDatabase({ kind: 'postgres', url: databaseUrl, poolMax: 1 });
  await sql`create schema ${sql.id(schema)}`.execute(admin.db);
  const database = await createDatabase({ kind: 'postgres', url: url.toString(), poolMax: 2 });
  try {
    await migrateToLatest(database.db);
    await sql`insert into webhook_endpoints (id, org_id, url, event_types) values ('we_bench', 'bench', 'http://127.0.0.1:9/', '{post.published}')`.execute(
      database.db,
    );
    await sql`insert into webhook_outbox (id, org_id, type, body, dispatched_at) values ('evt_bench', 'bench', 'post.published', '{}', now())`.execute(
      database.db,
    );
    await sql`
      insert into webhook_outbox (id, org_id, type, body, dispatched_at)
      select 'evt_bench' || n, 'bench', 'post.published', '{}', now() from generate_series(1, ${pendingRetries}) n
    `.execute(database.db);
    await sql`
      insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, attempt_count, next_attempt_at)
      select 'del_bench' || n, 'evt_bench' || n, 'we_bench', 'bench', 'post.published', 1,
        now() + interval '1 hour' + n * interval '1 millisecond'
      from generate_series(1, ${pendingRetries}) n
    `.execute(database.db);
    await sql`analyze webhook_deliveries`.execute(database.db);
    const passes: number[] = [];
    for (let i = 0; i < 7; i++) {
      const t0 = wallNow();
      const due = await queueDueDeliveries(database.db, { limit: 200, queueLeaseMs: 15_000 });
      passes.push(round(wallNow() - t0, 2));
      if (due.length > 0) throw new Error(`expected no due delivery, got ${due.length}`);
    }
    return { pendingRetries, passMs: spread(passes.slice(2)) };
  } finally {
    await database.close();
    await sql`drop schema ${sql.id(schema)} cascade`.execute(admin.db).catch(() => {});
    await admin.close();
  }
}

const num = (value: number | null | undefined, digits = 0) =>
  value === null || value === undefined || Number.isNaN(value)
    ? '–'
    : value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** Table rows of the engine's part (raw durable loop, two dispatchers), for report.ts's webhook table. */
export function renderWebhookEngineRows(w: WebhookResult): string[] {
  const rows: string[] = [];
  if (w.durableLoop) {
    const d = w.durableLoop.deliveriesPerSec;
    rows.push(
      `| raw durable loop (${w.durableLoop.connections} connections; signs each body, records outcomes in INSERTs of 100) | ${num(d.median)} (${num(d.min)}–${num(d.max)}) | ${num(d.median / w.rawLoop.deliveriesPerSec.median, 2)}× | p99 ${w.durableLoop.trials.map((t) => num(t.p99Ms, 1)).join(', ')} ms; ${machineText(w.durableLoop.trials)}; ${verifiedText(w.durableLoop.trials)} |`,
    );
  }
  const warm = w.warmDispatcher;
  if (warm && (warm.status === 'ok' || warm.status === 'incomplete')) {
    rows.push(
      `| webhook dispatcher, 1 warm process (${num(w.warmUpEvents)} events delivered first) | ${num(warm.deliveriesPerSec)} | ${num((warm.deliveriesPerSec ?? 0) / w.rawLoop.deliveriesPerSec.median, 2)}× | ${warm.status}: ${num(warm.verified)}/${num(warm.events)} verified, ${warm.invalid} invalid, ${warm.duplicate} duplicate; ${num(warm.cpuUsPerDelivery)} µs CPU/delivery |`,
    );
  }
  const two = w.twoDispatchers;
  if (two && (two.status === 'ok' || two.status === 'incomplete')) {
    rows.push(
      `| webhook dispatcher, 2 processes | ${num(two.deliveriesPerSec)} | ${num((two.deliveriesPerSec ?? 0) / w.rawLoop.deliveriesPerSec.median, 2)}× | ${two.status}: ${num(two.verified)}/${num(two.events)} verified, ${two.invalid} invalid, ${two.duplicate} duplicate, ${num((two.events ?? 0) - (two.verified ?? 0))} not delivered when the run stopped; ${num(two.cpuUsPerDelivery)} µs CPU/delivery (both) |`,
    );
  } else if (two) {
    rows.push(`| webhook dispatcher, 2 processes | **${two.status}** | – | ${two.reason ?? ''} |`);
  }
  return rows;
}

/** ", 0.52× its trials just before and after (9,100 and 9,900/s)", or nothing. */
function besideText(beside: BesideRatio | null | undefined): string {
  if (!beside) return '';
  return ` (median of its trials), ${num(beside.ratio, 2)}× its trials just before and after the run (${num(beside.trials[0])} and ${num(beside.trials[1])}/s)`;
}

/** Lines under the webhook table: the ratios the issue asks for and the scheduler pass. */
export function renderWebhookEngineNotes(w: WebhookResult): string[] {
  const d = w.dispatcher;
  const lines = [''];
  lines.push(
    `- one dispatcher: ${num(d.deliveriesPerSec)} deliveries/s = ${num(w.durableRatio, 2)}× the raw durable loop${besideText(w.beside?.dispatcher)} (target ≥ 5,000/s and ≥ 0.6×); not delivered when the run stopped (lost unless the run timed out) ${num((d.events ?? 0) - (d.verified ?? 0))}, duplicates ${num(d.duplicate)}`,
  );
  lines.push(
    `- one dispatcher (WEBHOOK_ENDPOINT_CONCURRENCY=${num(d.endpointCap)}): ${num(d.cpuUsPerDelivery)} µs dispatcher CPU and ${num(d.pgCpuUsPerDelivery)} µs PostgreSQL backend CPU per delivery (the backends serving its connections, by application_name; WAL writer and checkpointer not included); ${num(d.queriesPerDelivery, 3)} PostgreSQL round trips per delivery (every query its pg clients sent, BEGIN/COMMIT included); ${machineRunText(d.machine)}`,
  );
  lines.push(
    `- one dispatcher ${warmText(d)} = ${num(w.warmDurableRatio, 2)}× the raw durable loop (whose trials are warm too)`,
  );
  const warm = w.warmDispatcher;
  if (warm) {
    lines.push(
      warm.status === 'ok' || warm.status === 'incomplete'
        ? `- one warm dispatcher (it first delivered ${num(w.warmUpEvents)} events, then was stopped with SIGSTOP while the backlog was published, and continued): ${num(warm.deliveriesPerSec)} deliveries/s = ${num(w.warmDispatcherDurableRatio, 2)}× the raw durable loop${besideText(w.beside?.warm)}; ${warm.status}: ${num(warm.verified)}/${num(warm.events)} verified, ${num(warm.duplicate)} duplicate; ${num(warm.cpuUsPerDelivery)} µs dispatcher CPU, ${num(warm.pgCpuUsPerDelivery)} µs PostgreSQL CPU, ${num(warm.queriesPerDelivery, 3)} round trips per delivery; ${machineRunText(warm.machine)}; its ${warmText(warm)}`
        : `- one warm dispatcher: ${warm.status} ${warm.reason ?? ''}`,
    );
  }
  lines.push(`- two dispatchers over one: ${num(w.twoOverOne, 2)}× (target ≥ 1.6×)`);
  lines.push(
    `- two dispatchers ${warmText(w.twoDispatchers)} = ${num(w.warmTwoOverOne, 2)}× one past start-up (CPU: both processes)`,
  );
  const two = w.twoDispatchers;
  if (two?.pgCpuUsPerDelivery !== undefined)
    lines.push(
      `- two dispatchers: ${num(two.pgCpuUsPerDelivery)} µs PostgreSQL backend CPU and ${num(two.queriesPerDelivery, 3)} round trips per delivery`,
    );
  const steady = w.steady;
  if (steady?.latency) {
    const l = steady.latency;
    lines.push(
      `- steady ${num(l.eventsPerSec)} events/s for ${num(l.published)} events (${num(l.publishedPerSec)}/s achieved, ${num(l.publishFailed)} publish calls failed), one dispatcher: publishPost's commit → receiver p50 ${num(l.fromCommit.p50Ms, 1)} ms, p99 ${num(l.fromCommit.p99Ms, 1)} ms, max ${num(l.fromCommit.maxMs, 1)} ms (target p50 ≤ 50, p99 ≤ 250); from sending the statement: p50 ${num(l.fromSend.p50Ms, 1)}, p99 ${num(l.fromSend.p99Ms, 1)} ms; ${num(steady.verified)}/${num(steady.events)} verified, ${num(steady.duplicate)} duplicate; ${num(steady.cpuUsPerDelivery)} µs dispatcher CPU, ${num(steady.pgCpuUsPerDelivery)} µs PostgreSQL CPU, ${num(steady.queriesPerDelivery, 3)} round trips per delivery`,
    );
    if (l.bySecond) {
      const b = l.bySecond;
      lines.push(
        `  - by when published: first second (the dispatcher just started) p50 ${num(b.firstSecond.p50Ms, 1)} / p99 ${num(b.firstSecond.p99Ms, 1)} ms; after it p50 ${num(b.afterFirstSecond.p50Ms, 1)} / p99 ${num(b.afterFirstSecond.p99Ms, 1)} / max ${num(b.afterFirstSecond.maxMs, 1)} ms; worst second: second ${b.worstSecond.second}, p99 ${num(b.worstSecond.p99Ms, 1)} ms; p99 per second: ${b.p99BySecond.map((v) => num(v, 0)).join(', ')} ms`,
      );
    }
    if (l.stages) lines.push(`  - ${stagesLine(l.stages)}`);
  } else if (steady) {
    lines.push(`- steady rate: ${steady.status} ${steady.reason ?? ''}`);
  }
  const notify = w.steadyNotify;
  if (notify?.latency) {
    const l = notify.latency;
    lines.push(
      `- the same steady trial with publishPost's NOTIFY instead of the Redis wake-up (same run): ${num(l.publishedPerSec)}/s achieved (${num(l.publishFailed)} publish calls failed), commit → receiver p50 ${num(l.fromCommit.p50Ms, 1)} ms, p99 ${num(l.fromCommit.p99Ms, 1)} ms; from sending the statement: p50 ${num(l.fromSend.p50Ms, 1)}, p99 ${num(l.fromSend.p99Ms, 1)} ms`,
    );
    if (l.stages) lines.push(`  - ${stagesLine(l.stages)}`);
  }
  const m = w.multiEndpoint;
  if (m) {
    const one = m.dispatcher;
    const two = m.twoDispatchers;
    const d = m.durableLoop?.deliveriesPerSec;
    lines.push(
      `- ${m.endpoints} endpoints on the same receiver (cap ${num(one.endpointCap)} each, ${num(m.deliveries)} deliveries): raw durable loop at ${num(m.durableLoop?.connections)} connections ${num(d?.median)}/s (${num(d?.min)}–${num(d?.max)}); one dispatcher ${num(one.deliveriesPerSec)}/s = ${num(m.durableRatio, 2)}× (${one.status}: ${num(one.verified)}/${num(one.events)} verified, ${num(one.duplicate)} duplicate; ${num(one.cpuUsPerDelivery)} µs dispatcher CPU, ${num(one.pgCpuUsPerDelivery)} µs PostgreSQL CPU, ${num(one.queriesPerDelivery, 3)} round trips per delivery); two dispatchers ${num(two?.deliveriesPerSec)}/s = ${num(m.twoOverOne, 2)}× one (${two?.status ?? 'skipped'}: ${num(two?.verified)}/${num(two?.events)} verified, ${num(two?.duplicate)} duplicate)`,
    );
    lines.push(
      `  - one dispatcher ${warmText(one)} = ${num(m.warmDurableRatio, 2)}× the raw durable loop; two dispatchers ${warmText(two)} = ${num(m.warmTwoOverOne, 2)}× one`,
    );
  }
  if (w.schedulerPass) {
    const p = w.schedulerPass.passMs;
    lines.push(
      `- scheduler pass (due scan, LIMIT 200) with ${num(w.schedulerPass.pendingRetries)} pending retries: ${num(p.median, 2)} ms median (${num(p.min, 2)}–${num(p.max, 2)})`,
    );
  }
  return lines;
}
