/**
 * `pnpm bench --scenarios tracing`: what OpenTelemetry tracing costs three paths, off against on with
 * `parentbased_traceidratio` at 0.01 and at 1.0, in one run:
 * - `http`: `posts(first: 10)` over HTTP, one API process per setting, the three loaded at once (httpPath):
 *   server CPU µs/request and req/s over the same windows, and each window's ratio to off;
 * - `fanout`: subscription fan-out to `sockets` sockets on one API process in embedded mode on PostgreSQL
 *   (FanoutRun, bench/src/fanout.ts): deliveries/s at saturation and server CPU µs/delivery;
 * - `webhooks`: one warm `apps/webhook-dispatcher` draining a backlog to the verifying receiver
 *   (runDispatcher, bench/src/webhooks/): dispatcher CPU µs/delivery and deliveries/s.
 * Every Herald process of a setting (API and dispatcher alike) gets that setting's OTEL_* variables and
 * exports OTLP/protobuf to a sink in this process (tracing-settings.ts), which counts what each setting
 * sent. Fan-out and webhooks: the settings take turns (off, 0.01, 1.0, off, …) `repeats` times; HTTP: the
 * three side by side, windows read at the same moments. Each setting is reported by the median of its
 * measurements, and against off by the median of each measurement's ratio to off's beside it (the same
 * window; the same round's turn): on a shared machine load comes and goes, and one lucky measurement moved
 * the lowest-of-N figures used before by 15–25 %.
 */
import { join } from 'node:path';
import { Pool } from 'undici';
import { median, procSample, round, sleep, stopChild } from './common.js';
import { type FanoutConfig, type FanoutResult, FanoutRun } from './fanout.js';
import { HTTP_OPERATIONS } from './http-sql.js';
import { type HeraldTarget, startHeraldTarget, type Target } from './targets.js';
import {
  LowestCpu,
  type OtlpSink,
  postsRequester,
  type SinkCount,
  startOtlpSink,
  TRACING_SETTINGS,
  type TracingSetting,
  type TracingSettingId,
  tracingEnv,
} from './tracing-settings.js';
import { startReceiver } from './webhooks/children.js';
import { runDispatcher } from './webhooks/dispatcher-run.js';
import { WARM_FRACTION } from './webhooks/results.js';

export type TracingPath = 'http' | 'fanout' | 'webhooks';
export const TRACING_PATHS: readonly TracingPath[] = ['http', 'fanout', 'webhooks'];

/** The goal for ratio 0.01: at most this much more CPU per unit than off. */
export const RATIO_001_GOAL_PCT = 5;

/**
 * Warm-up of each HTTP round's new API processes, ms (`--http-warmup-ms`), loaded side by side: well past
 * the first export, which the batch processor sends 5 s after the first sampled span, and past the ~8,000
 * requests after a process's first sampled ones in which V8 rebuilds what those threw away
 * (bench/micro/first-sampled.ts, bench/results/tracing/low-ratio-costs.md).
 */
export const TRACING_HTTP_WARMUP_MS = 15_000;

export interface TracingConfig {
  databaseUrl: string | undefined;
  /** The webhook path needs it (the dispatcher's work stream). */
  redisUrl: string | undefined;
  paths: TracingPath[];
  /** Rounds of the three settings, taking turns. */
  repeats: number;
  /** Extra environment for every Herald process (`--herald-env`); the OTEL_* variables of a setting win. */
  heraldEnv: Record<string, string>;
  /**
   * Per round: new processes, `warmupMs` of load, then `trialsPerRound` windows of `trialMs`, the three
   * settings loaded at once with `connections` requests in flight each.
   */
  http: { connections: number; trialsPerRound: number; trialMs: number; warmupMs: number };
  /** The fan-out machinery's settings (its saturation trials: one per round). */
  fanout: Omit<FanoutConfig, 'trials' | 'log'>;
  /**
   * Saturation trials of each setting per round (taking turns within the round too): after the set-up a
   * trial costs seconds, and fan-out's figures move by ±15 % between trials on this machine.
   */
  fanoutTrialsPerRound: number;
  webhooks: {
    events: number;
    warmUpEvents: number;
    connections: number;
    timeoutMs: number;
    /** `--webhook-cpu-prof`: each dispatcher writes a V8 CPU profile under `<dir>/<setting id>/`. */
    cpuProfDir?: string;
  };
  log: (line: string) => void;
}

/** One measurement of one setting: a trial (HTTP, fan-out) or a dispatcher run (webhooks). */
export interface TracingMeasurement {
  /** 1-based round it belongs to. */
  round: number;
  /** CPU µs per request or delivery (the server process; the dispatcher for webhooks). */
  cpu: number;
  /** Requests or deliveries per second. */
  rate: number;
  /** Off's CPU per unit and rate beside this one: HTTP's same side-by-side window (else see withOffBeside). */
  offCpu?: number;
  offRate?: number;
}

export interface TracingRow {
  path: TracingPath;
  setting: TracingSettingId;
  name: string;
  measurements: TracingMeasurement[];
  /** The measurement with the lowest CPU per unit (null: none succeeded). */
  lowest: TracingMeasurement | null;
  /**
   * Against off's, in % (null for off or without figures): the median of each measurement's ratio to
   * off's beside it (HTTP: the same window; fan-out and webhooks: the same round's turn).
   */
  vsOff: { cpuPct: number | null; ratePct: number | null };
  /** The median CPU per unit and rate of the measurements (what the table gives). */
  median?: { cpu: number; rate: number; count: number };
  /** What the sink received from this path's processes at this setting. */
  exported: SinkCount;
  /** Anything that went wrong (failed answers, wrong or missing deliveries, a run that did not finish). */
  problems: string[];
}

export interface TracingResult {
  repeats: number;
  sockets: number;
  rows: TracingRow[];
  notes: string[];
  skipped: string[];
  /** Exports the sink got on a path naming no setting (expected 0). */
  sinkStrays: number;
}

const PATH_LABELS: Record<TracingPath, { title: string; unit: string; rate: string }> = {
  http: { title: '`posts(first: 10)` over HTTP', unit: 'request', rate: 'req/s' },
  fanout: { title: 'subscription fan-out', unit: 'delivery', rate: 'deliveries/s' },
  webhooks: { title: 'webhook dispatcher', unit: 'delivery', rate: 'deliveries/s' },
};

/** What a path measured, per setting, before the rows are made. */
type Collected = Map<TracingSettingId, { measurements: TracingMeasurement[]; problems: string[] }>;

const collected = (): Collected =>
  new Map(TRACING_SETTINGS.map((setting) => [setting.id, { measurements: [], problems: [] }]));

export async function runTracing(config: TracingConfig): Promise<TracingResult> {
  const { log } = config;
  const sink = await startOtlpSink();
  const rows: TracingRow[] = [];
  const skipped: string[] = [];
  const notes: string[] = [];
  try {
    for (const path of config.paths) {
      const missing =
        path === 'webhooks'
          ? [!config.databaseUrl && 'DATABASE_URL', !config.redisUrl && 'REDIS_URL'].filter(Boolean)
          : [!config.databaseUrl && 'DATABASE_URL'].filter(Boolean);
      if (missing.length) {
        skipped.push(`${path}: needs ${missing.join(' and ')}`);
        continue;
      }
      const before = new Map(TRACING_SETTINGS.map((setting) => [setting.id, sink.received(setting.id)]));
      let figures: Collected;
      try {
        figures =
          path === 'http'
            ? await httpPath(config, sink)
            : path === 'fanout'
              ? await fanoutPath(config, sink)
              : await webhooksPath(config, sink);
      } catch (error) {
        skipped.push(`${path}: failed: ${(error as Error).message.split('\n')[0]}`);
        log(`tracing ${path}: FAILED: ${(error as Error).stack ?? error}`);
        continue;
      }
      rows.push(...rowsOf(path, figures, sink, before));
    }
  } finally {
    await sink.close();
  }
  const fanout = config.fanout;
  notes.push(
    `Settings: off = no OTEL_* endpoint (the OpenTelemetry SDK is not loaded); on = \`OTEL_EXPORTER_OTLP_ENDPOINT\` at a sink in the bench process (node:http on 127.0.0.1, drains each export and answers 200 at once; OTLP/protobuf, the SDK's default batch processor), \`OTEL_TRACES_SAMPLER=parentbased_traceidratio\`, \`OTEL_TRACES_SAMPLER_ARG\` 0.01 or 1. Every Herald process of a setting gets them (the API, and the dispatcher with the API that publishes its backlog).`,
    `Each row gives the median of its measurements' CPU per unit and rate ("every CPU figure" lists them all, in order), and "against off" the median of each measurement's figure against off's beside it: for HTTP off's in the same window, for fan-out and webhooks off's turn of the same round (the settings take turns, off, 0.01, 1.0, off, …, in ${config.repeats} round${config.repeats === 1 ? '' : 's'}). On a shared machine other load comes and goes between turns; a single lucky or unlucky measurement moves a lowest-of-N comparison by 15–25 % here, a median of pairs much less. The JSON keeps each setting's lowest too. The goal for ratio 0.01 is at most ${RATIO_001_GOAL_PCT} % more CPU per unit than off; ratio 1.0 is reported.`,
    ...(config.paths.includes('http')
      ? [
          `HTTP: \`posts(first: 10)\` with authors (the HTTP section's document), the three settings side by side: per round (${config.repeats}) one new API process each (PostgreSQL, ${HTTP_SEED_POSTS} posts, the API image's node flags), all loaded at once from this process, ${config.http.connections} keep-alive requests in flight each, warm-up ${config.http.warmupMs} ms, then ${config.http.trialsPerRound} window${config.http.trialsPerRound === 1 ? '' : 's'} of ${config.http.trialMs} ms (each stretched, up to ${WINDOW_STRETCH}×, until every process answered in it) in which every process's CPU is read at the same moments; CPU = the API process's (every thread) ÷ its answered requests. Each row gives the median over the windows; "against off" is the median of each window's figure against off's in that same window: load from elsewhere falls on the three alike, so these ratios hold where rounds run one after another moved by ±25 %. Three servers and their load share the cores, so the CPU figures are higher than the HTTP section's: compare them with each other.`,
        ]
      : []),
    ...(config.paths.includes('fanout')
      ? [
          `Fan-out: ${fanout.sockets} sockets on one API process each (embedded mode: in-memory pub/sub, PostgreSQL, \`pnpm start\`'s node flags), the three set up side by side with their own load clients (${fanout.workers} process${fanout.workers === 1 ? '' : 'es'} each) (bench/src/fanout.ts: warm-up, latency phases), then ${config.fanoutTrialsPerRound} saturation trial${config.fanoutTrialsPerRound === 1 ? '' : 's'} of ${fanout.trialMs} ms of each per round, taking turns; events published with publishPost over HTTP (its span, PostgreSQL and Redis spans and one fan-out span per event are the traced work); CPU = the API process's ÷ checked deliveries.`,
        ]
      : []),
    ...(config.paths.includes('webhooks')
      ? [
          `Webhooks: per round and setting a new API (cluster mode, Redis) and one dispatcher process (bench/src/webhooks/dispatcher-run.ts): the dispatcher first delivers ${config.webhooks.warmUpEvents} events, is stopped while ${config.webhooks.events} more are published, and continued; the figures are over the backlog after its first ${Math.round(WARM_FRACTION * 100)} % (the warm window; the whole backlog when that window is empty), CPU = the dispatcher's ÷ verified deliveries; WEBHOOK_ENDPOINT_CONCURRENCY=${config.webhooks.connections}, one endpoint. publishPost's sampling decision travels with the event, so at 0.01 about 1 % of deliveries are traced.`,
        ]
      : []),
    '"Exported" is what the sink received from the path\'s processes at that setting, their final flush at shutdown included.',
  );
  return {
    repeats: config.repeats,
    sockets: fanout.sockets,
    rows,
    notes,
    skipped,
    sinkStrays: sink.strays,
  };
}

function rowsOf(
  path: TracingPath,
  figures: Collected,
  sink: OtlpSink,
  before: Map<TracingSettingId, SinkCount>,
): TracingRow[] {
  const lowest = new LowestCpu<TracingMeasurement>();
  for (const [setting, { measurements }] of figures) for (const one of measurements) lowest.offer(setting, one);
  const off = lowest.get('off');
  const pct = (value: number | undefined, base: number | undefined) =>
    value !== undefined && base !== undefined && base > 0 ? round(((value - base) / base) * 100, 1) : null;
  return TRACING_SETTINGS.map((setting) => {
    const best = lowest.get(setting.id) ?? null;
    const now = sink.received(setting.id);
    const was = before.get(setting.id)!;
    const { measurements, problems } = figures.get(setting.id)!;
    const row: TracingRow = {
      path,
      setting: setting.id,
      name: setting.name,
      measurements,
      lowest: best,
      vsOff:
        setting.id === 'off'
          ? { cpuPct: null, ratePct: null }
          : { cpuPct: pct(best?.cpu, off?.cpu), ratePct: pct(best?.rate, off?.rate) },
      exported: { exports: now.exports - was.exports, bytes: now.bytes - was.bytes },
      problems,
    };
    if (measurements.length > 0) {
      row.median = {
        cpu: median(measurements.map((one) => one.cpu)),
        rate: median(measurements.map((one) => one.rate)),
        count: measurements.length,
      };
      if (setting.id !== 'off')
        row.vsOff = pairedAgainstOff(withOffBeside(measurements, figures.get('off')!.measurements));
    }
    return row;
  });
}

/**
 * Each measurement with off's beside it: HTTP's carry it already (the same window); fan-out's and the
 * dispatcher's get off's k-th of the same round (the trial or run just before theirs, taking turns).
 */
function withOffBeside(
  measurements: readonly TracingMeasurement[],
  off: readonly TracingMeasurement[],
): TracingMeasurement[] {
  const seen = new Map<number, number>();
  return measurements.map((one) => {
    if (one.offCpu !== undefined) return one;
    const k = seen.get(one.round) ?? 0;
    seen.set(one.round, k + 1);
    const twin = off.filter((candidate) => candidate.round === one.round)[k];
    return twin ? { ...one, offCpu: twin.cpu, offRate: twin.rate } : one;
  });
}

/** The median of each measurement's CPU and rate against off's beside it ({@link withOffBeside}), in %. */
function pairedAgainstOff(measurements: readonly TracingMeasurement[]): TracingRow['vsOff'] {
  const ratio = (value: number, base: number | undefined) =>
    base !== undefined && base > 0 && Number.isFinite(value) ? value / base - 1 : Number.NaN;
  const cpu = measurements.map((one) => ratio(one.cpu, one.offCpu)).filter(Number.isFinite);
  const rate = measurements.map((one) => ratio(one.rate, one.offRate)).filter(Number.isFinite);
  return {
    cpuPct: cpu.length ? round(median(cpu) * 100, 1) : null,
    ratePct: rate.length ? round(median(rate) * 100, 1) : null,
  };
}

const envOf = (config: TracingConfig, setting: TracingSetting, sink: OtlpSink) => ({
  ...config.heraldEnv,
  ...tracingEnv(setting, sink),
});

/**
 * `posts(first: 10)`, the three settings side by side: per round, one new API process per setting (the
 * image's node flags, PostgreSQL, 100 posts each), all loaded at once with `connections` requests in flight
 * each, and every process's CPU read over the same windows. Run one after another, two rounds of one
 * process differ by ±25 % on this machine (other load comes and goes between them); side by side that
 * load falls on the three alike, and each window's ratio to off holds to a few per cent.
 */
async function httpPath(config: TracingConfig, sink: OtlpSink): Promise<Collected> {
  const figures = collected();
  for (let run = 1; run <= config.repeats; run++) {
    config.log(`tracing http round ${run}/${config.repeats}: the three settings side by side`);
    const targets: HeraldTarget[] = [];
    try {
      for (const setting of TRACING_SETTINGS) {
        const target = await startHeraldTarget({
          pods: 1,
          pubsub: 'memory',
          databaseUrl: config.databaseUrl,
          database: 'postgres',
          env: { LOG_LEVEL: 'warn', ...envOf(config, setting, sink) },
          label: `tracing-http-${setting.id}`,
          inspect: false,
          // The server tenants hit: the container image's node flags, as the HTTP section's `herald` row.
          runtime: 'image',
        });
        targets.push(target);
        await target.prepareEvents(HTTP_SEED_POSTS);
      }
      const windows = await sideBySideHttp(targets, config);
      TRACING_SETTINGS.forEach((setting, i) => {
        const entry = figures.get(setting.id)!;
        if (windows.failures[i]! > 0)
          entry.problems.push(`round ${run}: ${windows.failures[i]} failed answers (${windows.firstFailure[i]})`);
        if (targets[i]!.deaths.length) entry.problems.push(...targets[i]!.deaths);
        windows.windows.forEach((window, k) => {
          const one = window[i]!;
          const off = window[0]!;
          if (one.requests > 0 && off.requests > 0)
            entry.measurements.push({ round: run, cpu: one.cpu, rate: one.rate, offCpu: off.cpu, offRate: off.rate });
          else
            entry.problems.push(
              `round ${run}, window ${k + 1}: no answer from ${one.requests > 0 ? 'off' : 'this setting'} in ${WINDOW_STRETCH}× ${config.http.trialMs} ms`,
            );
        });
      });
    } finally {
      await Promise.allSettled(targets.map((target) => target.stop()));
    }
  }
  return figures;
}

/** How far a window may stretch past `trialMs`, as a multiple of it, waiting for every process to answer. */
const WINDOW_STRETCH = 20;

/** Posts in each HTTP process's organisation (the page reads the newest 10). */
const HTTP_SEED_POSTS = 100;

interface HttpWindow {
  requests: number;
  /** CPU µs per answered request (the API process, every thread). */
  cpu: number;
  rate: number;
}

/**
 * Loads every target at once (`connections` loops each, without pause) for the warm-up and then
 * `trialsPerRound` windows of `trialMs`, reading each process's CPU and answers at every window's
 * edge. Bounded: each request times out (postsRequester), and the loops stop with the last window.
 */
async function sideBySideHttp(
  targets: readonly HeraldTarget[],
  config: TracingConfig,
): Promise<{ windows: HttpWindow[][]; failures: number[]; firstFailure: string[] }> {
  const pools = targets.map(
    (target) =>
      new Pool(target.wsUrls[0]!.replace(/^ws:/, 'http:').replace(/\/graphql$/, ''), {
        connections: config.http.connections,
      }),
  );
  const requesters = targets.map((target, i) =>
    postsRequester(pools[i]!, target.token, target.orgId, HTTP_OPERATIONS.posts),
  );
  const answered = targets.map(() => 0);
  const failures = targets.map(() => 0);
  const firstFailure = targets.map(() => '');
  let stopped = false;
  const loops = requesters.flatMap((request, i) =>
    Array.from({ length: config.http.connections }, async () => {
      while (!stopped) {
        try {
          await request();
          answered[i]!++;
        } catch (error) {
          failures[i]!++;
          firstFailure[i] ||= (error as Error).message.split('\n')[0]!;
          // A process that fails every request must not turn the loop into a spin.
          await sleep(10);
        }
      }
    }),
  );
  const windows: HttpWindow[][] = [];
  try {
    await sleep(config.http.warmupMs);
    const edge = () => ({
      at: performance.now(),
      cpu: targets.map((target) => procSample(target.pids[0]!).cpuUs),
      answered: [...answered],
    });
    let from = edge();
    for (let k = 0; k < config.http.trialsPerRound; k++) {
      await sleep(config.http.trialMs);
      // A window closes once every process answered in it: a window where one answered nothing (a stall,
      // a collection, a first request still compiling on a loaded machine) has no figure to pair. Bounded.
      const cap = from.at + WINDOW_STRETCH * config.http.trialMs;
      while (answered.some((count, i) => count === from.answered[i]) && performance.now() < cap) await sleep(20);
      const to = edge();
      const seconds = (to.at - from.at) / 1000;
      windows.push(
        targets.map((_, i) => {
          const requests = to.answered[i]! - from.answered[i]!;
          return {
            requests,
            cpu: requests > 0 ? (to.cpu[i]! - from.cpu[i]!) / requests : Number.NaN,
            rate: requests / seconds,
          };
        }),
      );
      from = to;
    }
  } finally {
    stopped = true;
    await Promise.all(loops);
    await Promise.all(pools.map((pool) => pool.close()));
  }
  return { windows, failures, firstFailure };
}

/**
 * Fan-out: the three settings' API processes set up side by side (each with its sockets and load
 * clients), then one saturation trial each per round, taking turns.
 */
async function fanoutPath(config: TracingConfig, sink: OtlpSink): Promise<Collected> {
  const figures = collected();
  const active: Array<{ setting: TracingSetting; target: Target; run: FanoutRun }> = [];
  try {
    for (const setting of TRACING_SETTINGS) {
      config.log(`tracing fan-out: set-up of ${setting.name} (${config.fanout.sockets} sockets)`);
      const target = await startHeraldTarget({
        pods: 1,
        pubsub: 'memory',
        databaseUrl: config.databaseUrl,
        database: 'postgres',
        env: envOf(config, setting, sink),
        label: `tracing ${setting.id}`,
      });
      const run = new FanoutRun(`tracing ${setting.id}`, target, {
        ...config.fanout,
        trials: config.repeats * config.fanoutTrialsPerRound,
        log: config.log,
      });
      active.push({ setting, target, run });
      await run.setup();
    }
    for (const { run } of active) await run.latencyPhases();
    for (let round = 0; round < config.repeats; round++) {
      config.log(
        `tracing fan-out round ${round + 1}/${config.repeats}: ${config.fanoutTrialsPerRound} saturation trial(s) of each setting, taking turns`,
      );
      for (let trial = 0; trial < config.fanoutTrialsPerRound; trial++)
        for (const { run } of active) await run.saturationTrial(round * config.fanoutTrialsPerRound + trial);
    }
    for (const { setting, target, run } of active) {
      const result: FanoutResult = await run.finish();
      const entry = figures.get(setting.id)!;
      const c = result.correctness;
      if (result.subscribed < config.fanout.sockets)
        entry.problems.push(`${result.subscribed}/${config.fanout.sockets} sockets subscribed`);
      if (c.wrong || c.missing || c.duplicate || c.publishErrors)
        entry.problems.push(
          `${c.wrong} wrong, ${c.missing} missing, ${c.duplicate} duplicate deliveries, ${c.publishErrors} failed publishes`,
        );
      if (target.deaths.length) entry.problems.push(...target.deaths);
      result.saturation.trials.forEach((trial, k) => {
        const round = Math.floor(k / config.fanoutTrialsPerRound) + 1;
        if (trial.deliveries > 0)
          entry.measurements.push({ round, cpu: trial.serverCpuUsPerDelivery, rate: trial.deliveriesPerSec });
        if (trial.ranOutOfEvents) entry.problems.push(`round ${round}: ran out of events (a shorter trial)`);
        if (trial.timedOutEvents) entry.problems.push(`round ${round}: ${trial.timedOutEvents} events timed out`);
      });
    }
  } finally {
    for (const { run, target } of active) {
      await run.close().catch(() => {});
      await target.stop().catch(() => {});
    }
  }
  return figures;
}

/** Webhooks: per round and setting, one warm dispatcher draining a backlog (runDispatcher). */
async function webhooksPath(config: TracingConfig, sink: OtlpSink): Promise<Collected> {
  const figures = collected();
  const { receiver, origin } = await startReceiver();
  try {
    for (let run = 1; run <= config.repeats; run++) {
      for (const setting of TRACING_SETTINGS) {
        config.log(`tracing webhooks round ${run}/${config.repeats}: ${setting.name}`);
        const entry = figures.get(setting.id)!;
        const result = await runDispatcher(
          {
            databaseUrl: config.databaseUrl,
            redisUrl: config.redisUrl,
            trials: 0,
            trialMs: 0,
            connections: config.webhooks.connections,
            dispatcherEvents: config.webhooks.events,
            dispatcherTimeoutMs: config.webhooks.timeoutMs,
            heraldEnv: envOf(config, setting, sink),
            ...(config.webhooks.cpuProfDir ? { cpuProfDir: join(config.webhooks.cpuProfDir, setting.id) } : {}),
            log: config.log,
          },
          receiver,
          origin,
          1,
          'backlog',
          1,
          config.webhooks.events,
          false,
          config.webhooks.warmUpEvents,
        );
        if (result.status !== 'ok') entry.problems.push(`round ${run}: ${result.status} ${result.reason ?? ''}`.trim());
        if (result.invalid || result.duplicate)
          entry.problems.push(`round ${run}: ${result.invalid} invalid, ${result.duplicate} duplicate deliveries`);
        const cpu = result.warm?.cpuUsPerDelivery ?? result.cpuUsPerDelivery;
        const rate = result.warm?.deliveriesPerSec ?? result.deliveriesPerSec;
        if (result.status === 'ok' && cpu !== undefined && rate !== undefined && Number.isFinite(cpu))
          entry.measurements.push({ round: run, cpu, rate });
        config.log(
          `  ${setting.name}: ${rate ?? '–'} deliveries/s, ${cpu ?? '–'} µs dispatcher CPU/delivery${result.warm ? ' (warm window)' : ''}`,
        );
      }
    }
  } finally {
    await stopChild(receiver.child);
  }
  return figures;
}

/** The scenario's table and notes (tracing.md in `--out`). */
export function tracingMarkdown(result: TracingResult): string {
  const lines = [
    `| path | tracing | CPU µs/unit | against off | rate | against off | goal | exported to the sink | every CPU figure (round) |`,
    '|---|---|---:|---:|---:|---:|---|---:|---|',
  ];
  for (const row of result.rows) {
    const label = PATH_LABELS[row.path];
    const title =
      row.path === 'fanout' ? `${label.title}, ${result.sockets.toLocaleString('en-US')} sockets` : label.title;
    // The measurements' median; "against off", the median of each one against off's beside it.
    const shown = row.median;
    const basis = row.median ? `median of ${row.median.count}` : '';
    const goal =
      row.setting === 'off'
        ? 'baseline'
        : row.setting === 'ratio-0.01'
          ? row.vsOff.cpuPct === null
            ? `≤ +${RATIO_001_GOAL_PCT} %: not measured`
            : `≤ +${RATIO_001_GOAL_PCT} % ${row.vsOff.cpuPct <= RATIO_001_GOAL_PCT ? '✓ met' : '✗ not met'}`
          : 'reported';
    const pct = (value: number | null) => (value === null ? '–' : `${value >= 0 ? '+' : ''}${value.toFixed(1)} %`);
    lines.push(
      `| ${title} | ${row.name} | ${shown ? `${round(shown.cpu, 1)} µs/${label.unit} (${basis})` : '–'} | ${
        row.setting === 'off' ? '–' : pct(row.vsOff.cpuPct)
      } | ${shown ? `${Math.round(shown.rate).toLocaleString('en-US')} ${label.rate}` : '–'} | ${
        row.setting === 'off' ? '–' : pct(row.vsOff.ratePct)
      } | ${goal} | ${row.exported.exports} exports, ${round(row.exported.bytes / 1024, 1)} KiB | ${row.measurements
        .map((one) => `${round(one.cpu, 1)} (${one.round})`)
        .join(', ')} |`,
    );
  }
  const problems = result.rows.flatMap((row) =>
    row.problems.map((problem) => `- ${PATH_LABELS[row.path].title}, ${row.name}: ${problem}`),
  );
  return [
    ...lines,
    '',
    ...result.notes.map((note) => `- ${note}`),
    ...(result.sinkStrays ? [`- The sink got ${result.sinkStrays} exports on a path naming no setting.`] : []),
    ...(problems.length ? ['', 'Problems:', '', ...problems] : []),
    ...(result.skipped.length ? ['', ...result.skipped.map((line) => `- skipped: ${line}`)] : []),
  ].join('\n');
}
