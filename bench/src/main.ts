/**
 * `pnpm bench`: the fan-out benchmark behind docs/scaling.md's measured figures, in one process tree on
 * 127.0.0.1.
 *
 *   pnpm bench                                   # everything (≈ 8–10 min on 2 cores), results in bench/results/
 *   pnpm bench --quick                           # 1k sockets only, shorter trials (≈ 2 min)
 *   pnpm bench --scenarios raw,embedded --sockets 10000
 *   pnpm bench --scenarios embedded-stock        # Herald with WS_SHARED_EXECUTION=false (no shared execution)
 *   pnpm bench --scenarios nginx3 --sockets 6000 # 3 pods + Redis behind deploy/'s nginx: throughput, p99, spread
 *   pnpm bench --herald-env KEY=VALUE,KEY2=VALUE # extra environment for every Herald pod
 *   pnpm bench --profile                         # node --cpu-prof at 1k sockets (raw, Herald, stock Herald) → bench/results/profiles/fanout-cpu-1k.md
 *   pnpm bench --compare old.json new.json       # deliveries/s, p99, CPU and RSS side by side
 *   pnpm bench --render bench/results/results.json  # redo results.{md,svg} from the JSON
 *   pnpm bench --out /tmp/run1                   # write the results somewhere else
 *   pnpm bench --sequential                      # one scenario at a time instead of side by side
 *   pnpm bench --scenarios resume --resume-clients 200 --resume-events 200  # resume storm (default 1000 × 1000)
 *   pnpm bench --scenarios webhooks --webhook-steady-only true --out /tmp/s  # the steady webhook trial alone (≈ 20 s)
 *   pnpm bench --scenarios webhooks --webhook-dispatchers source  # dispatchers from the TypeScript under tsx
 *                                                # (default: their production build, as the image runs them)
 *   pnpm bench --scenarios noisy-neighbour --out /tmp/n  # B's latency alone and under A's storm, every path (≈ 3 min)
 *   pnpm bench --scenarios tracing --out /tmp/t  # tracing off / ratio 0.01 / ratio 1.0: posts over HTTP, fan-out at
 *                                                # the largest --sockets (10000; --quick 1000), webhooks → tracing.{md,json}
 *   pnpm bench --scenarios tracing --tracing-repeats 3 --tracing-paths http,fanout,webhooks  # rounds per setting, paths
 *   pnpm bench --scenarios tracing --tracing-fanout-trials 3     # fan-out saturation trials per setting and round
 *
 * DATABASE_URL and REDIS_URL default to the local servers (as .ci/run does). Every child process is
 * stopped on exit and on Ctrl-C; PostgreSQL schemas (`herald_bench_*`) and Redis keys are removed.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { cleanupAll, installExitHandlers, ROOT, round, wallNow } from './common.js';
import { type FanoutConfig, type FanoutResult, FanoutRun } from './fanout.js';
import { type FootprintResult, runFootprint } from './footprint.js';
import {
  HTTP_OPERATION_IDS,
  HTTP_TARGETS,
  type HttpResult,
  type HttpTargetId,
  httpProfileMarkdown,
  runHttp,
} from './http.js';
import { NGINX3_MAX_SOCKETS, startNginxTarget } from './nginx3.js';
import { noisyMarkdown, runNoisyNeighbour, STORM_PRIORITIES } from './noisy-neighbour.js';
import { peerScenarios } from './peers.js';
import { type CpuProfile, glanceMarkdown, type ProfileSummary, profileMarkdown, summariseProfile } from './profile.js';
import { PEERS } from './protocol.js';
import {
  type BenchResults,
  chart,
  currentLoadavg,
  gitCommit,
  machineDescription,
  markdown,
  withRatios,
} from './report.js';
import { type ResumeResult, runResumeCatchUp } from './resume.js';
import { pingPostgres } from './schema.js';
import { startHeraldTarget, startRawTarget, type Target } from './targets.js';
import { runTokenVerify, type TokenVerifyResult } from './token-verify.js';
import { runTracing, TRACING_HTTP_WARMUP_MS, TRACING_PATHS, tracingMarkdown } from './tracing.js';
import { buildDispatcherImage, redisCommand, runWebhooks, type WebhookResult } from './webhooks.js';

type Args = Record<string, string | boolean>;

/** Flags that stand alone: the word after one is not its value. */
const SWITCHES = new Set(['http-profile', 'profile', 'quick', 'sequential']);

/** How a number flag is read: a count of things, or a quantity (milliseconds, a rate). */
type NumberKind = 'count' | 'count or zero' | 'above zero' | 'zero or more';

/** Every number `pnpm bench` reads. A zero is only taken where it means "skip it" or "none". */
const NUMBER_FLAGS: Record<string, NumberKind> = {
  'budget-rate': 'above zero',
  'connect-concurrency': 'count',
  'event-timeout-ms': 'above zero',
  'fixed-ms': 'above zero',
  'fixed-rate': 'above zero',
  'http-connections': 'count',
  'http-trial-ms': 'above zero',
  'http-trials': 'count',
  'http-warmup-ms': 'zero or more',
  'noisy-probe-ms': 'above zero',
  'resume-clients': 'count',
  'resume-events': 'count',
  'resume-latency-events': 'count or zero',
  'resume-timeout-ms': 'above zero',
  single: 'count',
  sockets: 'count',
  'source-addresses': 'count',
  'token-clients': 'count',
  'token-iterations': 'count',
  'token-trials': 'count',
  'tracing-fanout-trials': 'count',
  'tracing-repeats': 'count',
  'trial-ms': 'above zero',
  trials: 'count',
  'warmup-ms': 'zero or more',
  'webhook-connections': 'count',
  'webhook-endpoint-cap': 'count',
  'webhook-endpoints': 'count',
  'webhook-events': 'count',
  'webhook-new-process-runs': 'count',
  'webhook-steady-ms': 'above zero',
  'webhook-steady-rate': 'zero or more',
  'webhook-timeout-ms': 'above zero',
  'webhook-trial-ms': 'above zero',
  'webhook-trials': 'count',
  'webhook-warm-up': 'count or zero',
  window: 'count',
  workers: 'count',
};

/** The flags that take a word or a list rather than a number. */
const WORD_FLAGS = [
  'compare',
  'embedded-db',
  'herald-env',
  'http-operations',
  'http-targets',
  'noisy-storm-priority',
  'out',
  'render',
  'scenarios',
  'tracing-paths',
  'webhook-cpu-prof',
  'webhook-steady-compare-notify',
  'webhook-steady-only',
  'webhook-two',
  'webhook-fifo',
  'webhook-dispatchers',
];

/** Every flag `pnpm bench` reads; anything else is refused (a typo would otherwise run the defaults). */
const KNOWN_FLAGS = new Set([...SWITCHES, ...Object.keys(NUMBER_FLAGS), ...WORD_FLAGS]);

/** The fan-out scenarios (each one server set-up measured at every socket count). */
const FANOUT_SCENARIOS = [
  'raw',
  'embedded',
  'redis',
  'redis-history-off',
  'embedded-stock',
  'redis-stock',
  ...PEERS,
  'nginx3',
] as const;
type FanoutScenarioId = (typeof FANOUT_SCENARIOS)[number];
/** The scenarios that run once, apart from the socket counts. */
const STANDALONE_SCENARIOS = ['webhooks', 'token-verify', 'resume', 'http', 'footprint', 'noisy-neighbour', 'tracing'];
const SCENARIOS = [...FANOUT_SCENARIOS, ...STANDALONE_SCENARIOS];

/** Every HTTP target `--http-targets` may name (`herald-yoga-path` is not in the default list). */
const HTTP_TARGET_IDS = Object.keys({
  raw: true,
  herald: true,
  'herald-start': true,
  'herald-yoga-path': true,
  yoga: true,
  'herald-pglite': true,
} satisfies Record<HttpTargetId, true>) as HttpTargetId[];

function parseArgs(argv: string[]): { args: Args; rest: string[] } {
  const args: Args = {};
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) {
      rest.push(arg);
      continue;
    }
    const [key, inline] = arg.slice(2).split(/=(.*)/s, 2) as [string, string | undefined];
    if (SWITCHES.has(key)) {
      if (inline !== undefined) usage(`--${key} takes no value, got ${JSON.stringify(inline)}`);
      args[key] = true;
    } else if (inline !== undefined) args[key] = inline;
    else if (argv[i + 1] !== undefined && !argv[i + 1]!.startsWith('--')) args[key] = argv[++i]!;
    else args[key] = true;
  }
  return { args, rest };
}

/** A bad command line: one line on stderr, exit 2, nothing started. */
function usage(line: string): never {
  process.stderr.write(`pnpm bench: ${line}\n`);
  process.exit(2);
}

/** Refuses a mistyped flag, a flag left without its value, and a word that belongs to no flag. */
function refuseMisshapenCommandLine(args: Args, rest: string[]): void {
  const unknown = Object.keys(args).filter((key) => !KNOWN_FLAGS.has(key));
  if (unknown.length > 0) {
    usage(
      `unknown flag ${unknown.map((key) => `--${key}`).join(', ')} (the flags are listed at the top of bench/src/main.ts)`,
    );
  }
  const bare = Object.keys(args).find((key) => args[key] === true && !SWITCHES.has(key));
  if (bare !== undefined) usage(`--${bare} takes a value`);
  const stray = args.compare === undefined ? rest[0] : rest[1];
  if (stray !== undefined)
    usage(`stray argument ${JSON.stringify(stray)} (a value goes right after its flag; only --compare takes two)`);
}

/** What a number flag of this kind refuses, as the end of the refusal line; undefined when it takes the number. */
function numberKindRefusal(kind: NumberKind, parsed: number): string | undefined {
  if (kind === 'count') return Number.isInteger(parsed) && parsed >= 1 ? undefined : 'a whole number of at least 1';
  if (kind === 'count or zero') return Number.isInteger(parsed) ? undefined : 'a whole number';
  if (kind === 'above zero') return parsed > 0 ? undefined : 'a number above 0';
  return undefined;
}

/** A flag's value as a number of the kind {@link NUMBER_FLAGS} gives it, or the one-line refusal. */
export function numberFlag(args: Args, key: string, fallback: number): number {
  const value = args[key];
  if (value === undefined) return fallback;
  const parsed = typeof value === 'string' && value.trim() !== '' ? Number(value) : Number.NaN;
  if (!Number.isFinite(parsed) || parsed < 0) usage(`--${key} takes a number, got ${JSON.stringify(value)}`);
  const refusal = numberKindRefusal(NUMBER_FLAGS[key] ?? 'zero or more', parsed);
  if (refusal !== undefined) usage(`--${key} takes ${refusal}, got ${JSON.stringify(value)}`);
  return parsed;
}

/** `--sockets`: a list of socket counts. */
function socketCounts(args: Args, fallback: string): number[] {
  return String(args.sockets ?? fallback)
    .split(',')
    .map((count) => numberFlag({ sockets: count }, 'sockets', 0));
}

/** Reads every number flag given, so a bad one is refused before anything starts (not minutes into a run). */
function refuseBadNumbers(args: Args): void {
  for (const key of Object.keys(NUMBER_FLAGS)) {
    if (args[key] === undefined) continue;
    if (key === 'sockets') socketCounts(args, '');
    else numberFlag(args, key, 0);
  }
}

/** A flag's value as one of `choices`, or the one-line refusal. */
function choiceFlag<Choice extends string>(
  args: Args,
  key: string,
  choices: readonly Choice[],
  fallback: Choice,
): Choice {
  const value = args[key] ?? fallback;
  const choice = choices.find((candidate) => candidate === value);
  if (choice === undefined) usage(`--${key} takes one of ${choices.join(', ')}, got ${JSON.stringify(value)}`);
  return choice;
}

/** A flag's comma-separated value, each item one of `allowed`, or the one-line refusal. */
function listFlag<Item extends string>(args: Args, key: string, allowed: readonly Item[], fallback: string): Item[] {
  const isAllowed = (item: string): item is Item => (allowed as readonly string[]).includes(item);
  const value = String(args[key] ?? fallback);
  const items = value.split(',').filter(Boolean);
  const bad = items.length === 0 ? value : items.find((item) => !isAllowed(item));
  if (bad !== undefined) usage(`--${key} takes a list of ${allowed.join(', ')}, got ${JSON.stringify(bad)}`);
  return items.filter(isAllowed);
}

/** The flags that take words from a fixed set, each refused in one line when it names something else. */
function readWordFlags(args: Args) {
  const defaultScenarios =
    args.profile === true
      ? 'raw,embedded,embedded-stock'
      : 'raw,embedded,redis,redis-history-off,embedded-stock,apollo,mercurius,mercurius-nojit,yoga,nginx3,webhooks,token-verify,resume,http,footprint';
  return {
    scenarios: listFlag(args, 'scenarios', SCENARIOS, defaultScenarios),
    embeddedDb: choiceFlag(args, 'embedded-db', ['postgres', 'pglite'], 'postgres'),
    httpTargets: listFlag(args, 'http-targets', HTTP_TARGET_IDS, HTTP_TARGETS.join(',')),
    httpOperations: listFlag(args, 'http-operations', HTTP_OPERATION_IDS, HTTP_OPERATION_IDS.join(',')),
    tracingPaths: listFlag(args, 'tracing-paths', TRACING_PATHS, TRACING_PATHS.join(',')),
    noisyStormPriority: choiceFlag(args, 'noisy-storm-priority', STORM_PRIORITIES, 'nice'),
    webhookTwo: choiceFlag(args, 'webhook-two', ['true', 'false'], 'true'),
    webhookFifo: choiceFlag(args, 'webhook-fifo', ['true', 'false'], 'true'),
    webhookDispatchers: choiceFlag(args, 'webhook-dispatchers', ['image', 'source'], 'image'),
    webhookSteadyOnly: choiceFlag(args, 'webhook-steady-only', ['true', 'false'], 'false'),
    webhookSteadyCompareNotify: choiceFlag(args, 'webhook-steady-compare-notify', ['true', 'first', 'false'], 'false'),
  };
}

/** A results.json named on the command line, or the one-line refusal. */
function readResults(flag: string, file: string): BenchResults {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as BenchResults;
  } catch (error) {
    usage(`--${flag} could not read ${JSON.stringify(file)}: ${(error as Error).message.split('\n')[0]}`);
  }
}

const started = wallNow();
const log = (line: string) =>
  process.stderr.write(`[${String(Math.round((wallNow() - started) / 1000)).padStart(4)} s] ${line}\n`);

interface ScenarioSpec {
  label: string;
  needs: Array<'postgres' | 'redis'>;
  /** Larger socket counts are skipped (with a note). */
  maxSockets?: number;
  start(profileDir?: string): Promise<Target>;
}

async function main() {
  const { args, rest } = parseArgs(process.argv.slice(2));
  refuseMisshapenCommandLine(args, rest);
  if (args.render) {
    // Re-renders results.md and results.svg from a results.json (after a change to the report's format).
    const file = resolve(ROOT, String(args.render));
    const results = readResults('render', file);
    results.fanout = withRatios(results.fanout);
    writeFileSync(file.replace(/\.json$/, '.md'), markdown(results));
    writeFileSync(file.replace(/\.json$/, '.svg'), chart(results));
    process.stdout.write(`rendered ${file.replace(/\.json$/, '.{md,svg}')}\n`);
    return;
  }
  if (args.compare) {
    const files = [typeof args.compare === 'string' ? args.compare : '', ...rest].filter(Boolean);
    if (files.length !== 2) usage('--compare takes two results files: --compare <old.json> <new.json>');
    process.stdout.write(compare(files[0]!, files[1]!));
    return;
  }
  refuseBadNumbers(args);
  const {
    scenarios,
    embeddedDb,
    httpTargets,
    httpOperations,
    tracingPaths,
    noisyStormPriority,
    webhookTwo,
    webhookFifo,
    webhookDispatchers,
    webhookSteadyOnly,
    webhookSteadyCompareNotify,
  } = readWordFlags(args);
  installExitHandlers();
  const quick = args.quick === true;
  const profile = args.profile === true;
  const num = (key: string, fallback: number) => numberFlag(args, key, fallback);
  const list = (key: string, fallback: string) =>
    String(args[key] ?? fallback)
      .split(',')
      .filter(Boolean);
  const outDir = resolve(ROOT, String(args.out ?? 'bench/results'));
  const databaseUrl = process.env.DATABASE_URL;
  const redisUrl = process.env.REDIS_URL;
  const heraldEnv = Object.fromEntries(
    list('herald-env', '').map((pair) => {
      const [key, value] = pair.split(/=(.*)/s, 2);
      return [key!, value ?? ''];
    }),
  );

  const sourceAddresses = num('source-addresses', 4);
  const fanoutConfig: Omit<FanoutConfig, 'sockets'> = {
    workers: num('workers', 2),
    localAddresses: Array.from({ length: sourceAddresses }, (_, i) => `127.0.0.${i + 2}`),
    connectConcurrency: num('connect-concurrency', 64),
    warmupMs: num('warmup-ms', quick ? 1000 : 1500),
    trials: num('trials', quick ? 3 : 5),
    trialMs: num('trial-ms', quick ? 2000 : 2500),
    window: args.window === undefined ? 'auto' : numberFlag(args, 'window', 0),
    fixedDeliveriesPerSec: num('fixed-rate', 5_000),
    fixedMs: num('fixed-ms', quick ? 4000 : 10_000),
    singleTrials: num('single', quick ? 3 : 5),
    calibrationEvents: 30,
    budgetDeliveriesPerSec: num('budget-rate', 100_000),
    eventTimeoutMs: num('event-timeout-ms', 30_000),
    pauseMs: 300,
    log,
  };
  const sockets = socketCounts(args, quick || profile ? '1000' : '1000,10000');
  const tracingRepeats = num('tracing-repeats', quick ? 2 : 3);
  const tracingFanoutTrials = num('tracing-fanout-trials', quick ? 1 : 3);

  // What's reachable decides what can run; nothing is faked.
  const skipped: string[] = [];
  const reachable = async (what: string, url: string | undefined, check: (url: string) => Promise<boolean>) => {
    if (!url) {
      skipped.push(`${what} not set`);
      return false;
    }
    try {
      if (await check(url)) return true;
      skipped.push(`${what} did not answer as expected`);
    } catch (error) {
      skipped.push(`${what} unreachable: ${(error as Error).message}`);
    }
    return false;
  };
  const postgresOk = await reachable('DATABASE_URL', databaseUrl, (url) => pingPostgres(url).then(() => true));
  const redisOk = await reachable(
    'REDIS_URL',
    redisUrl,
    async (url) => (await redisCommand(url, ['PING'])) === '+PONG',
  );
  const embeddedDatabase = embeddedDb === 'pglite' || !postgresOk ? 'pglite' : 'postgres';

  const herald = (id: string, label: string, pods: 1 | 2, pubsub: 'memory' | 'redis', env: Record<string, string>) =>
    ({
      label,
      needs: pubsub === 'redis' ? ['postgres', 'redis'] : embeddedDatabase === 'postgres' ? ['postgres'] : [],
      start: (profileDir?: string) =>
        startHeraldTarget({
          pods,
          pubsub,
          databaseUrl,
          redisUrl,
          database: pubsub === 'redis' ? 'postgres' : embeddedDatabase,
          env: { ...env, ...heraldEnv },
          ...(profileDir ? { cpuProfDir: profileDir } : {}),
          label: id,
        }).then((target) => Object.assign(target, { label })),
    }) satisfies ScenarioSpec;
  const stock = { WS_SHARED_EXECUTION: 'false' };
  const specs: Record<string, ScenarioSpec> = {
    raw: {
      label: 'raw ws broadcast',
      needs: [],
      start: (profileDir?: string) => startRawTarget(undefined, profileDir),
    },
    embedded: herald(
      'embedded',
      `Herald embedded (1 pod, in-memory pub/sub${embeddedDatabase === 'pglite' ? ', PGlite' : ''})`,
      1,
      'memory',
      {},
    ),
    redis: herald('redis', 'Herald 2 pods + Redis', 2, 'redis', {}),
    // Resumable subscriptions: the same without keeping the history, to price it.
    'redis-history-off': herald(
      'redis-history-off',
      'Herald 2 pods + Redis, history off (SUBSCRIPTION_HISTORY_SIZE=0)',
      2,
      'redis',
      { SUBSCRIPTION_HISTORY_SIZE: '0' },
    ),
    'embedded-stock': herald(
      'embedded-stock',
      `Herald embedded, stock path (WS_SHARED_EXECUTION=false${embeddedDatabase === 'pglite' ? ', PGlite' : ''})`,
      1,
      'memory',
      stock,
    ),
    'redis-stock': herald(
      'redis-stock',
      'Herald 2 pods + Redis, stock path (WS_SHARED_EXECUTION=false)',
      2,
      'redis',
      stock,
    ),
    ...peerScenarios(),
    // Load through the load balancer (bench/src/nginx3.ts).
    nginx3: {
      label: "Herald 3 pods + Redis behind deploy/'s nginx",
      needs: ['postgres', 'redis'],
      maxSockets: NGINX3_MAX_SOCKETS,
      start: (profileDir?: string) =>
        startNginxTarget({
          databaseUrl,
          redisUrl,
          env: heraldEnv,
          ...(profileDir ? { cpuProfDir: profileDir } : {}),
          label: "Herald 3 pods + Redis behind deploy/'s nginx",
        }),
    },
  } satisfies Record<FanoutScenarioId, ScenarioSpec>;

  log(
    `bench: scenarios ${scenarios.join(', ')} at ${sockets.join(', ')} sockets; ${fanoutConfig.workers} client processes; load average ${currentLoadavg().join(' ')}`,
  );
  const loadavgAtStart = currentLoadavg();
  const fanout: FanoutResult[] = [];
  const profiles: string[] = [];
  const glance: Array<{ title: string; summary: ProfileSummary; cpuUsPerDelivery: number }> = [];
  let webhooks: WebhookResult | null = null;
  let tokenVerify: TokenVerifyResult | null = null;
  const profileDir = profile ? mkdtempSync(join(tmpdir(), 'herald-bench-prof-')) : undefined;

  interface Active {
    id: string;
    spec: ScenarioSpec;
    target: Target;
    run: FanoutRun;
    dir: string | undefined;
  }
  const fail = async (spec: ScenarioSpec, size: number, error: unknown, active?: Active, target?: Target) => {
    const deaths = (active?.target ?? target)?.deaths ?? [];
    skipped.push(
      `${spec.label} @ ${size}: failed: ${(error as Error).message.split('\n')[0]}${deaths.length ? `. ${deaths.join('. ')}` : ''}`,
    );
    log(`  FAILED: ${spec.label} @ ${size}: ${(error as Error).stack ?? error}`);
    await active?.run.close().catch(() => {});
    await (active?.target ?? target)?.stop().catch(() => {});
  };
  const profileOf = (active: Active, result: FanoutResult) => {
    if (!active.dir) return;
    const file = readdirSync(active.dir).find((name) => name.endsWith('.cpuprofile'));
    if (!file) throw new Error(`${active.id}: no .cpuprofile was written`);
    const data = JSON.parse(readFileSync(join(active.dir, file), 'utf8')) as CpuProfile;
    const summary = summariseProfile(data, result.saturationWindowsUs);
    const cpu = result.saturation.serverCpuUsPerDelivery.median;
    glance.push({ title: `${active.id} @ ${result.sockets}`, summary, cpuUsPerDelivery: cpu });
    profiles.push(
      profileMarkdown(
        `${active.spec.label} @ ${result.sockets} sockets`,
        [
          `${result.saturation.trials.length} saturation trials, ${result.saturation.deliveriesPerSec.median} deliveries/s (median; the profiler itself costs a few %), ${cpu} µs server CPU per delivery`,
          `Setup: ${result.notes.join('; ')}`,
        ],
        summary,
      ),
    );
    mkdirSync(outDir, { recursive: true });
    writeFileSync(join(outDir, `${active.id}-${result.sockets}.cpuprofile`), JSON.stringify(data));
  };

  // At each socket count the scenarios are set up side by side (each with its own servers and load
  // clients), measured for latency one after the other, and then take turns for the saturation trials,
  // so the raw baseline and Herald see the same background load. --sequential runs them one at a time.
  for (const size of sockets) {
    const runnable = scenarios.filter((id) => {
      const spec = specs[id];
      if (!spec) return false;
      const missing = spec.needs.filter((need) => (need === 'postgres' ? !postgresOk : !redisOk));
      if (missing.length) skipped.push(`${spec.label} @ ${size}: needs ${missing.join(' and ')}`);
      if (spec.maxSockets !== undefined && size > spec.maxSockets) {
        skipped.push(
          `${spec.label} @ ${size}: runs at up to ${spec.maxSockets} sockets (one nginx worker's open files)`,
        );
        return false;
      }
      return missing.length === 0;
    });
    const batches = args.sequential === true ? runnable.map((id) => [id]) : runnable.length ? [runnable] : [];
    for (const batch of batches) {
      let active: Active[] = [];
      for (const id of batch) {
        const spec = specs[id]!;
        log(`${spec.label} @ ${size} sockets: set-up`);
        const dir = profileDir ? mkdtempSync(join(profileDir, `${id}-`)) : undefined;
        let target: Target | undefined;
        let entry: Active | undefined;
        try {
          target = await spec.start(dir);
          entry = { id, spec, target, run: new FanoutRun(id, target, { ...fanoutConfig, sockets: size }), dir };
          await entry.run.setup();
          active.push(entry);
        } catch (error) {
          await fail(spec, size, error, entry, target);
        }
      }
      const step = async (what: string, entry: Active, action: () => Promise<unknown>) => {
        try {
          await action();
        } catch (error) {
          active = active.filter((candidate) => candidate !== entry);
          await fail(entry.spec, size, new Error(`${what}: ${(error as Error).message}`), entry);
        }
      };
      for (const entry of [...active]) {
        log(`${entry.spec.label} @ ${size} sockets: latency`);
        await step('latency phases', entry, () => entry.run.latencyPhases());
      }
      for (let k = 0; k < fanoutConfig.trials; k++) {
        log(`saturation trial ${k + 1}/${fanoutConfig.trials} @ ${size} sockets, each scenario in turn`);
        for (const entry of [...active]) await step(`saturation trial ${k}`, entry, () => entry.run.saturationTrial(k));
      }
      for (const entry of active) {
        try {
          const result = await entry.run.finish();
          result.label = entry.spec.label;
          await entry.run.close();
          await entry.target.stop();
          fanout.push(result);
          profileOf(entry, result);
        } catch (error) {
          await fail(entry.spec, size, error, entry);
        }
      }
    }
  }
  if (scenarios.includes('webhooks')) {
    log('webhooks: raw undici POST loop and the dispatcher, to one local receiver');
    // The dispatchers as their image runs them (a production build, ~10 s to make), or the sources under tsx.
    const buildDir = webhookDispatchers === 'image' ? mkdtempSync(join(tmpdir(), 'herald-bench-dispatcher-')) : null;
    const dispatcherBuild = buildDir ? await buildDispatcherImage(buildDir) : undefined;
    if (buildDir) log(`  dispatchers: the production build in ${buildDir}`);
    webhooks = await runWebhooks({
      databaseUrl: postgresOk ? databaseUrl : undefined,
      redisUrl: redisOk ? redisUrl : undefined,
      trials: num('webhook-trials', quick ? 2 : 3),
      trialMs: num('webhook-trial-ms', quick ? 2000 : 4000),
      connections: num('webhook-connections', 10),
      dispatcherEvents: num('webhook-events', quick ? 1000 : 10000),
      dispatcherTimeoutMs: num('webhook-timeout-ms', 60_000),
      twoDispatchers: webhookTwo === 'true',
      fifo: webhookFifo === 'true',
      newProcessRuns: num('webhook-new-process-runs', 1),
      traceFanOut: process.env.BENCH_TRACE_FAN_OUT === '1',
      warmUpEvents: num('webhook-warm-up', quick ? 1000 : 5000),
      endpoints: num('webhook-endpoints', 8),
      steadyCompareNotify: webhookSteadyCompareNotify === 'first' ? 'first' : webhookSteadyCompareNotify === 'true',
      ...(args['webhook-endpoint-cap'] ? { endpointCap: num('webhook-endpoint-cap', 10) } : {}),
      steadyEventsPerSec: num('webhook-steady-rate', 1000),
      steadyMs: num('webhook-steady-ms', quick ? 5000 : 10_000),
      steadyOnly: webhookSteadyOnly === 'true',
      ...(typeof args['webhook-cpu-prof'] === 'string' ? { cpuProfDir: resolve(args['webhook-cpu-prof']) } : {}),
      ...(dispatcherBuild ? { dispatcherBuild } : {}),
      log,
    });
    if (buildDir) rmSync(buildDir, { recursive: true, force: true });
  }

  if (scenarios.includes('token-verify')) {
    log('token-verify: HS256 verification cost, raw node:crypto vs jose vs Herald (cached and not)');
    tokenVerify = await runTokenVerify({
      iterations: num('token-iterations', quick ? 5_000 : 20_000),
      trials: num('token-trials', 3),
      clients: num('token-clients', 64),
    });
  }

  let resume: ResumeResult | null = null;
  if (scenarios.includes('resume')) {
    if (!postgresOk || !redisOk || !databaseUrl || !redisUrl) skipped.push('resume catch-up: needs postgres and redis');
    else {
      log('resume: clients resuming at once from one cursor');
      resume = await runResumeCatchUp({
        clients: num('resume-clients', quick ? 200 : 1_000),
        events: num('resume-events', quick ? 200 : 1_000),
        databaseUrl,
        redisUrl,
        timeoutMs: num('resume-timeout-ms', 300_000),
        latencyEvents: num('resume-latency-events', 100),
      }).catch((error: Error) => {
        skipped.push(`resume catch-up failed: ${error.message}`);
        return null;
      });
      if (resume?.publishLatency)
        log(
          `resume: publish→delivery p50 ${resume.publishLatency.toDelivery.p50} ms p99 ${resume.publishLatency.toDelivery.p99} ms (mutation answered p50 ${resume.publishLatency.publishAnswered.p50} ms); createPost p50 ${resume.publishLatency.createPost.p50} ms p99 ${resume.publishLatency.createPost.p99} ms`,
        );
      if (resume)
        log(
          `resume: ${resume.complete}/${resume.clients} complete, ${resume.eventsPerSec} events/s, all caught up in ${resume.wallMs} ms, per client p50 ${resume.clientCatchUpMs.p50} ms p99 ${resume.clientCatchUpMs.p99} ms; errors ${JSON.stringify(resume.errors)}, completed ${resume.completed}`,
        );
    }
  }

  let http: HttpResult | null = null;
  if (scenarios.includes('http')) {
    log('http: queries and mutations at 64 keep-alive connections, Herald vs raw node:http + pg vs stock Yoga');
    http = await runHttp({
      databaseUrl: postgresOk ? databaseUrl : undefined,
      targets: httpTargets,
      operations: httpOperations,
      connections: num('http-connections', 64),
      trials: num('http-trials', quick ? 3 : 5),
      trialMs: num('http-trial-ms', quick ? 2000 : 3000),
      warmupMs: num('http-warmup-ms', quick ? 1000 : 2000),
      seedPosts: 100,
      heraldEnv,
      log,
      ...(args['http-profile'] ? { profileDir: mkdtempSync(join(tmpdir(), 'herald-http-prof-')) } : {}),
    });
    if (http.profiles) {
      // `--http-profile`: its own generated file; PROFILE.md (hand-written index) and the notes are kept.
      const file = join(outDir, 'profiles', 'http-cpu.md');
      const section = httpProfileMarkdown(http.profiles, `pnpm bench ${process.argv.slice(2).join(' ')}`, [
        `${new Date().toISOString()}; ${machineDescription()}; Node ${process.version}; Herald ${gitCommit(ROOT)}; load average ${currentLoadavg().join(' ')}`,
      ]);
      mkdirSync(join(outDir, 'profiles'), { recursive: true });
      writeFileSync(file, section);
      log(`HTTP profile written to ${file}`);
    }
  }

  let footprint: FootprintResult | null = null;
  if (scenarios.includes('footprint')) {
    log('footprint: pnpm start (embedded mode) twice on a fresh data directory');
    footprint = await runFootprint();
  }

  if (scenarios.includes('noisy-neighbour')) {
    if (!databaseUrl || !redisUrl) throw new Error('noisy-neighbour needs DATABASE_URL and REDIS_URL');
    log('noisy-neighbour: organisation A storms past its quotas while B is measured (cluster mode)');
    const noisy = await runNoisyNeighbour({
      databaseUrl,
      redisUrl,
      probeMs: num('noisy-probe-ms', quick ? 5_000 : 10_000),
      stormPriority: noisyStormPriority,
      log,
    });
    mkdirSync(outDir, { recursive: true });
    const header = `# Noisy neighbour\n\n\`pnpm bench ${process.argv.slice(2).join(' ')}\` on ${machineDescription()}, Node ${process.version}, Herald ${gitCommit(ROOT)}, ${new Date().toISOString()}; load average at the end ${currentLoadavg().join(' ')}.\n\n`;
    writeFileSync(join(outDir, 'noisy-neighbour.md'), `${header}${noisyMarkdown(noisy)}\n`);
    writeFileSync(join(outDir, 'noisy-neighbour.json'), `${JSON.stringify(noisy, null, 2)}\n`);
    process.stdout.write(`${noisyMarkdown(noisy)}\n`);
  }

  if (scenarios.includes('tracing')) {
    const tracingSockets = Math.max(...sockets);
    log(
      `tracing: off, ratio 0.01 and ratio 1.0 taking turns ${tracingRepeats} times on ${tracingPaths.join(', ')} (fan-out at ${tracingSockets} sockets)`,
    );
    const tracing = await runTracing({
      databaseUrl: postgresOk ? databaseUrl : undefined,
      redisUrl: redisOk ? redisUrl : undefined,
      paths: tracingPaths,
      repeats: tracingRepeats,
      fanoutTrialsPerRound: tracingFanoutTrials,
      heraldEnv,
      // The three settings side by side: windows of each round, read at the same moments.
      http: {
        connections: num('http-connections', 16),
        trialsPerRound: num('http-trials', quick ? 2 : 4),
        trialMs: num('http-trial-ms', quick ? 2000 : 5000),
        // Past the first export (the batch processor sends one 5 s after the first sampled span): a traced
        // process's first sampled requests and first export make V8 throw away and rebuild node's
        // optimised stream, socket and promise code once (new object shapes reach it), about a second of
        // CPU in all; the windows measure the process after it, as it runs for hours.
        warmupMs: num('http-warmup-ms', TRACING_HTTP_WARMUP_MS),
      },
      // Only the saturation trials are compared: one event alone and the fixed rate are kept short.
      fanout: {
        ...fanoutConfig,
        sockets: tracingSockets,
        singleTrials: Math.min(1, fanoutConfig.singleTrials),
        fixedMs: Math.min(2000, fanoutConfig.fixedMs),
      },
      webhooks: {
        events: num('webhook-events', quick ? 1000 : 5000),
        warmUpEvents: num('webhook-warm-up', quick ? 500 : 2000),
        connections: num('webhook-connections', 10),
        timeoutMs: num('webhook-timeout-ms', 60_000),
        ...(typeof args['webhook-cpu-prof'] === 'string' ? { cpuProfDir: resolve(args['webhook-cpu-prof']) } : {}),
      },
      log,
    });
    skipped.push(...tracing.skipped.map((line) => `tracing ${line}`));
    mkdirSync(outDir, { recursive: true });
    const header = `# Tracing: off against on (ratio 0.01 and 1.0)\n\n\`pnpm bench ${process.argv.slice(2).join(' ')}\` on ${machineDescription()}, Node ${process.version}, Herald ${gitCommit(ROOT)}, ${new Date().toISOString()}; load average at the start ${loadavgAtStart.join(' ')}, at the end ${currentLoadavg().join(' ')}.\n\n`;
    writeFileSync(join(outDir, 'tracing.md'), `${header}${tracingMarkdown(tracing)}\n`);
    const run = {
      command: `pnpm bench ${process.argv.slice(2).join(' ')}`,
      date: new Date().toISOString(),
      machine: machineDescription(),
      node: process.version,
      commit: gitCommit(ROOT),
      loadavgAtStart,
      loadavgAtEnd: currentLoadavg(),
    };
    writeFileSync(join(outDir, 'tracing.json'), `${JSON.stringify({ run, ...tracing }, null, 2)}\n`);
    process.stdout.write(`${tracingMarkdown(tracing)}\n`);
    log(`tracing results written to ${join(outDir, 'tracing.{md,json}')}`);
  }

  const durationSec = (wallNow() - started) / 1000;
  const command = `pnpm bench${process.argv.length > 2 ? ` ${process.argv.slice(2).join(' ')}` : ''}`;
  const results: BenchResults = {
    run: {
      date: new Date().toISOString(),
      command,
      machine: machineDescription(),
      node: process.version,
      commit: gitCommit(ROOT),
      loadavgAtStart,
      loadavgAtEnd: currentLoadavg(),
      durationSec: round(durationSec, 0),
      config: {
        ...Object.fromEntries(Object.entries(fanoutConfig).filter(([key]) => key !== 'log')),
        sockets,
        scenarios,
        embeddedDatabase,
        heraldEnv,
        ulimitNofile: process.env.BENCH_ULIMIT_N ?? 'unknown',
      },
      notes: methodNotes(
        embeddedDatabase,
        embeddedDb === 'pglite',
        fanoutConfig.workers,
        fanoutConfig.localAddresses.join(', '),
      ),
    },
    fanout: withRatios(fanout),
    webhooks,
    tokenVerify,
    resume,
    http,
    footprint,
    skipped,
  };
  mkdirSync(outDir, { recursive: true });
  if (profile) {
    const header = [
      '# Where Herald spends its CPU at 1k sockets',
      '',
      `- Date: ${results.run.date}; ${results.run.machine}; Node ${results.run.node}; Herald ${results.run.commit}`,
      `- Command: \`${command}\` — \`node --cpu-prof\` on the API process (and on the raw ws server, profiled the same way for comparison); only the samples inside the saturation trials are counted (the profile's clock is the monotonic clock the bench records the trials with). Raw profiles: \`bench/results/*.cpuprofile\` (not committed; open them in Chrome DevTools → Performance).`,
      '- "Self time" is where the CPU was when sampled, not including callees. Areas are by script location (node_modules package, node: core module, Herald source); `(program)` is native V8/libuv time the profiler cannot attribute (mostly socket writes and microtask machinery).',
      '',
    ];
    // Its own generated file: PROFILE.md (the hand-written index) and the notes beside it are kept.
    const file = join(outDir, 'profiles', 'fanout-cpu-1k.md');
    mkdirSync(join(outDir, 'profiles'), { recursive: true });
    writeFileSync(file, `${[...header, glanceMarkdown(glance), ...profiles].join('\n')}\n`);
    log(`profile summary written to ${file}`);
    rmSync(profileDir!, { recursive: true, force: true });
  } else if (scenarios.every((id) => id === 'tracing')) {
    // Its own report only: results.{json,md,svg} would have nothing in them (and would overwrite a
    // results.md beside it, e.g. the micro benchmark's in bench/results/tracing/).
    log(`done in ${Math.round(durationSec)} s`);
  } else {
    writeFileSync(join(outDir, 'results.json'), `${JSON.stringify(results, null, 2)}\n`);
    writeFileSync(join(outDir, 'results.md'), markdown(results));
    writeFileSync(join(outDir, 'results.svg'), chart(results));
    process.stdout.write(`\n${markdown(results)}\n`);
    log(`results written to ${outDir}/results.{json,md,svg} in ${Math.round(durationSec)} s`);
  }
  await cleanupAll();
}

function methodNotes(embeddedDatabase: string, pgliteAsked: boolean, workers: number, sources: string): string[] {
  return [
    `Everything runs on 127.0.0.1 in one process tree: the server(s), ${workers} load-client processes (graphql-transport-ws spoken directly over \`ws\`: connection_init, subscribe, next), and this coordinator. Client sockets bind to ${sources} round-robin to spread ephemeral ports.`,
    'Every socket subscribes with its own id (`s<index>`). Every frame is checked: byte-identical to `{"id":<its id>,"type":"next","payload":{"data":{"postPublished":{id,title,tags,author{name}}}}}` for a post that was published, else parsed and compared field by field (counted as "not byte-identical but right"; later frames of the same event byte-identical to one that passed that check after the post id, e.g. Herald frames with the same `extensions.cursor`, are accepted without parsing, so the clients spend the same CPU per frame on every server); anything else is wrong. Each socket must get each published event exactly once: missing = published events × sockets − right deliveries; duplicates are counted apart.',
    'Publish: Herald = `publishPost` over HTTP through pod 1 (the real path, and the only one in embedded mode; its cost is in the server CPU and is also priced alone, with no socket connected, as "publish CPU µs/event"). Drafts are inserted before the run through @herald/db (PGlite: createPost over HTTP). Raw = HTTP POST /publish to the raw server. Publish time = just before the publish request is sent; receive time = when the client process reads the frame (both on the wall clock, sub-ms, same machine).',
    'Deliveries/s at saturation: a fixed number of events kept in flight (the window: 8 at 1k sockets, 2 at 10k) so the server is never idle and never buried; each trial lasts ~2.5 s (5 trials) and its rate is checked deliveries ÷ (last event fully received − first publish). Median and min–max of the trials. At each socket count every scenario is set up side by side (own servers, own load clients; the idle ones cost next to nothing), and the saturation trials take turns (raw, Herald, …, raw, Herald, …), so the ratios to raw compare trials that saw the same background load: "× raw" for deliveries/s and CPU is the median of the per-trial ratios (trial k of a scenario over trial k of raw). The latency phases run one scenario after the other.',
    'Fixed moderate rate: 5,000 deliveries/s (5 events/s at 1k sockets, 0.5 event/s at 10k), open loop, 10 s. One event → all sockets: an event on an idle server, 5 times; the table gives the median of the per-trial p50/p99/max.',
    'Server CPU µs/delivery: user+system CPU of the server process(es) (sum of /proc/<pid>/task/*/schedstat: every thread, ns resolution; both pods in two-pod mode) during the saturation trials ÷ deliveries. It includes publishPost. Client CPU is reported apart.',
    'RSS/socket: (RSS with every socket subscribed − RSS idle) ÷ sockets, each read after a forced full GC (through the inspector: the servers run with --inspect=127.0.0.1:0, no domain enabled). The V8 heap delta per socket is in the details.',
    `Herald embedded mode runs on ${embeddedDatabase === 'postgres' ? "PostgreSQL (own schema), not PGlite: PGlite is PostgreSQL compiled to WebAssembly running on the API's own event loop, so every publishPost transaction and author lookup would be charged to the fan-out CPU and stall it; with PostgreSQL the one-pod and two-pod scenarios differ only in pub/sub. `--embedded-db pglite` measures the PGlite setup" : `PGlite (${pgliteAsked ? '--embedded-db pglite' : 'no PostgreSQL was reachable'}): createPost/publishPost and the author lookups run inside the API process`}.`,
    '`ulimit -n` is raised to the hard limit by bench/run.sh (needed: 10k sockets are 10k descriptors in one server process).',
  ];
}

function compare(oldFile: string, newFile: string): string {
  const a = readResults('compare', oldFile);
  const b = readResults('compare', newFile);
  const lines = [
    `old: ${oldFile} (${a.run.date}, ${a.run.commit})`,
    `new: ${newFile} (${b.run.date}, ${b.run.commit})`,
    '',
    '| scenario | sockets | deliveries/s old → new | one-event p99 ms old → new | fixed p99 ms old → new | CPU µs/delivery old → new | RSS/socket KB old → new | × raw (deliveries/s) old → new |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const n of b.fanout) {
    const o = a.fanout.find((r) => r.id === n.id && r.sockets === n.sockets);
    const pair = (x: number | null | undefined, y: number | null | undefined) =>
      `${x ?? '–'} → ${y ?? '–'}${x && y ? ` (${y >= x ? '+' : ''}${round(((y - x) / x) * 100, 0)}%)` : ''}`;
    lines.push(
      `| ${n.label} | ${n.sockets} | ${pair(o?.saturation.deliveriesPerSec.median, n.saturation.deliveriesPerSec.median)} | ${pair(o?.single.p99Ms.median, n.single.p99Ms.median)} | ${pair(o?.fixed.latency.p99Ms, n.fixed.latency.p99Ms)} | ${pair(o?.saturation.serverCpuUsPerDelivery.median, n.saturation.serverCpuUsPerDelivery.median)} | ${pair(o?.rss.perSocketKB, n.rss.perSocketKB)} | ${pair(o?.vsRaw.deliveriesPerSec, n.vsRaw.deliveriesPerSec)} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}

main().catch(async (error: unknown) => {
  log(`bench failed: ${(error as Error).stack ?? error}`);
  await cleanupAll();
  process.exit(1);
});
