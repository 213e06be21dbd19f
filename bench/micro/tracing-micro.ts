/**
 * What tracing costs a small query over HTTP: `posts(first: 10)` against one API process (single mode,
 * PostgreSQL) started three times in one run: tracing off (no OTEL_* endpoint), on with
 * `parentbased_traceidratio` 0.01, and on with every request sampled (1.0), exporting OTLP/protobuf to a
 * sink in this process that answers 200 at once. Each round sends `requests` requests with `concurrency`
 * in flight after a warm-up, and prints requests/s, latency percentiles and the server's CPU µs per request
 * (from /proc). With `repeats` above 1 the three rounds run that many times, interleaved (off, 0.01, 1.0,
 * off, …), and a last table gives each setting's lowest CPU per request and the run it came from: on a
 * shared machine the load moves between rounds, and the least disturbed run is the closest to the cost.
 * Bounded: a fixed count per round, and each request times out.
 *   node --import tsx bench/micro/tracing-micro.ts [requests=4000] [concurrency=16] [repeats=1] [side-by-side]
 *
 * `side-by-side`: the three settings are served at the same time instead, one process each with
 * `concurrency` requests in flight, and each process's CPU is read over the same window (until one of them
 * answered `requests`): load from elsewhere then falls on the three alike, and the differences between
 * them hold better than between rounds run one after another. Its figures are higher than the sequential
 * rounds' (three servers and their load share two cores); compare its columns with each other.
 * `TRACING_MICRO_RATIOS=0,0.01` in the environment: off and these ratios instead of off, 0.01 and 1.0.
 * Results: bench/results/tracing/results.md.
 */
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { signToken } from '@herald/auth';
import pg from 'pg';
import { Pool } from 'undici';
import { type ApiProcess, startApiProcess } from '../../test/support/api-process.js';
import { UNLIMITED_TENANT_QUOTAS } from '../src/common.js';
import {
  againstOff,
  LowestCpu,
  postsRequester,
  seedPostsThroughApi,
  sideBySideWindow,
  startOtlpSink,
  TRACING_SETTINGS,
  type TracingSetting,
  type TracingSettingId,
  tracingEnv,
} from '../src/tracing-settings.js';

const requests = Number(process.argv[2] ?? 4_000);
const concurrency = Number(process.argv[3] ?? 16);
const repeats = Math.max(1, Number(process.argv[4] ?? 1));
const sideBySide = process.argv[5] === 'side-by-side';
// `TRACING_MICRO_WARM_UP=20000`: more warm-up requests per process before the measured window (default 1,000).
const WARM_UP_REQUESTS = Number(process.env.TRACING_MICRO_WARM_UP ?? 1_000);
const JWT_SECRET = 'tracing-micro-secret-0123456789abcdef';
const ORG = 'org-tracing-micro';
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

// The collector (bench/src/tracing-settings.ts): drains each export and answers 200, counting what it got.
// `TRACING_MICRO_RATIOS=0,0.01`: tracing off and these ratios instead of the settings of `pnpm bench`
// (ratio 0 prices an unsampled request alone: no request is ever sampled). Read before anything starts:
// a value the sampler would not take is refused in one line instead of running a setting that isn't one.
const chosenRatios = process.env.TRACING_MICRO_RATIOS?.split(',');
for (const ratio of chosenRatios ?? []) {
  const value = Number(ratio);
  if (ratio.trim() === '' || !Number.isFinite(value) || value < 0 || value > 1) {
    console.error(`tracing-micro: TRACING_MICRO_RATIOS takes ratios from 0 to 1, got "${ratio}"`);
    process.exit(2);
  }
}
const settings: readonly TracingSetting[] = chosenRatios
  ? [
      TRACING_SETTINGS[0]!,
      ...chosenRatios.map((ratio) => ({
        // An id of its own: the sink counts its exports apart (as strays).
        id: `ratio-${ratio}` as TracingSettingId,
        name: `on, ratio ${ratio}`,
        ratio,
      })),
    ]
  : TRACING_SETTINGS;

const sink = await startOtlpSink();
const token = await signToken(JWT_SECRET, { sub: 'bench', name: 'Bench', orgs: [ORG] });

function cpuMicros(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  // utime and stime (fields 14 and 15 of the whole line), in clock ticks of 10 ms.
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/** One `posts(first: 10)` request to the process behind `pool`, checked (tracing-settings.ts). */
const requesters = new WeakMap<Pool, (traceparent?: string) => Promise<void>>();
function postsRequest(pool: Pool): Promise<void> {
  let request = requesters.get(pool);
  if (!request) {
    request = postsRequester(pool, token, ORG);
    requesters.set(pool, request);
  }
  return request();
}

async function load(pool: Pool, count: number): Promise<number[]> {
  const latencies: number[] = [];
  let left = count;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left-- > 0) {
        const started = performance.now();
        await postsRequest(pool);
        latencies.push(performance.now() - started);
      }
    }),
  );
  return latencies.sort((a, b) => a - b);
}

/**
 * The `side-by-side` mode: the three settings at once, each process's CPU over the same window, `repeats`
 * times (new processes each time).
 */
async function runSideBySide(apiEnv: Record<string, string>): Promise<void> {
  console.log(
    `posts(first: 10) over HTTP, side by side: ${rounds.length} processes at once, ${concurrency} in flight each, ` +
      `CPU read over the window in which the first of them answered ${requests} (after ${WARM_UP_REQUESTS} warm-up each); ` +
      `load average ${loadavg()
        .map((load) => load.toFixed(1))
        .join(' ')}`,
  );
  console.log(`| run | ${rounds.map((round) => `${round.name}: µs/req, req/s`).join(' | ')} | against off |`);
  console.log(`|${' --- |'.repeat(rounds.length + 2)}`);
  const ratios: number[][] = [];
  for (let run = 1; run <= repeats; run++) {
    const apis = await startAll(rounds.map((round) => ({ ...apiEnv, ...round.env })));
    const pools = apis.map((api) => new Pool(api.baseUrl, { connections: concurrency }));
    try {
      if (run === 1) await seedPostsThroughApi(pools[0]!, token, ORG);
      await Promise.all(pools.map((pool) => load(pool, WARM_UP_REQUESTS)));
      const measured = await sideBySideWindow(pools, {
        concurrency,
        requests,
        request: (pool) => postsRequest(pool),
        sample: () => apis.map((api) => cpuMicros(api.child.pid as number)),
      });
      const cpu = measured.after.map((micros, i) => (micros - measured.before[i]!) / measured.done[i]!);
      ratios.push(cpu.map((value) => value / cpu[0]!));
      console.log(
        `| ${run} | ` +
          cpu
            .map((value, i) => `${Math.round(value)}, ${Math.round(measured.done[i]! / measured.seconds)}`)
            .join(' | ') +
          ` | ${cpu
            .slice(1)
            .map((value) => againstOff(value, cpu[0]!))
            .join(', ')} |`,
      );
    } finally {
      await Promise.all(pools.map((pool) => pool.close()));
      await Promise.all(apis.map((api) => api.stop('SIGTERM')));
    }
  }
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  console.log(
    `\nMedian against off over ${repeats} runs: ` +
      rounds
        .slice(1)
        .map((round, i) => `${round.name} ${((median(ratios.map((ratio) => ratio[i + 1]!)) - 1) * 100).toFixed(1)} %`)
        .join(', ') +
      `; load average now ${loadavg()
        .map((load) => load.toFixed(1))
        .join(' ')}`,
  );
}

/**
 * Starts one API process per environment, all at once. If one fails to start, the others are stopped before
 * the error is thrown: nothing is left running behind the run (and under the next one's measurements).
 */
async function startAll(envs: Record<string, string>[]): Promise<ApiProcess[]> {
  const started = await Promise.allSettled(envs.map((env) => startApiProcess(env)));
  const failed = started.find((result) => result.status === 'rejected');
  if (!failed) return started.map((result) => (result as PromiseFulfilledResult<ApiProcess>).value);
  await Promise.all(started.map((result) => (result.status === 'fulfilled' ? result.value.stop('SIGKILL') : null)));
  throw failed.reason;
}

const rounds = settings.map((setting) => ({
  id: setting.id,
  name: setting.name,
  env: tracingEnv(setting, sink),
}));

// A schema of its own, dropped at the end.
const schemaName = `tracing_micro_${process.pid}`;
const admin = new pg.Client({ connectionString: base });
await admin.connect();
await admin.query(`create schema ${schemaName}`);
const schemaUrl = new URL(base);
schemaUrl.searchParams.set('options', `-c search_path=${schemaName}`);
const apiEnv = { DATABASE_URL: schemaUrl.toString(), JWT_SECRET, ...UNLIMITED_TENANT_QUOTAS };
try {
  if (sideBySide) await runSideBySide(apiEnv);
  else await runRounds();
} finally {
  await admin.query(`drop schema ${schemaName} cascade`);
  await admin.end();
  await sink.close();
}

/** The rounds one after another (the default mode). */
async function runRounds(): Promise<void> {
  console.log(
    `posts(first: 10) over HTTP, ${requests} requests, ${concurrency} in flight, after ${WARM_UP_REQUESTS} warm-up, ` +
      `${repeats} × each setting; load average ${loadavg()
        .map((load) => load.toFixed(1))
        .join(' ')}`,
  );
  console.log('| tracing | run | req/s | p50 ms | p99 ms | server CPU µs/req | exported KiB |');
  console.log('| --- | --- | --- | --- | --- | --- | --- |');
  let seeded = false;
  const best = new LowestCpu<{ cpu: number; perSecond: number; run: number }>();
  const schedule = Array.from({ length: repeats }, (_, run) => rounds.map((round) => ({ round, run: run + 1 }))).flat();
  for (const { round, run } of schedule) {
    const api = await startApiProcess({ ...apiEnv, ...round.env });
    const pool = new Pool(api.baseUrl, { connections: concurrency });
    try {
      if (!seeded) {
        await seedPostsThroughApi(pool, token, ORG);
        seeded = true;
      }
      await load(pool, WARM_UP_REQUESTS);
      const exportedBefore = sink.received(round.id).bytes;
      const cpuBefore = cpuMicros(api.child.pid as number);
      const started = performance.now();
      const latencies = await load(pool, requests);
      const seconds = (performance.now() - started) / 1000;
      const cpu = (cpuMicros(api.child.pid as number) - cpuBefore) / requests;
      const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]!.toFixed(2);
      // The last batch is exported within the schedule delay: wait for it before reading the sink.
      await new Promise((resolve) => setTimeout(resolve, round.env.OTEL_EXPORTER_OTLP_ENDPOINT ? 5_500 : 0));
      console.log(
        `| ${round.name} | ${run} | ${Math.round(requests / seconds)} | ${at(0.5)} | ${at(0.99)} | ${Math.round(cpu)} | ${Math.round((sink.received(round.id).bytes - exportedBefore) / 1024)} |`,
      );
      best.offer(round.id, { cpu, perSecond: requests / seconds, run });
    } finally {
      await pool.close();
      await api.stop('SIGTERM');
    }
  }
  if (repeats > 1) {
    const off = best.get('off')!.cpu;
    console.log(
      `\nLowest CPU per request of ${repeats} runs; load average now ${loadavg()
        .map((load) => load.toFixed(1))
        .join(' ')}`,
    );
    console.log('| tracing | server CPU µs/req | against off | req/s (that run) | run |');
    console.log('| --- | --- | --- | --- | --- |');
    for (const { id, name } of rounds) {
      const { cpu, perSecond, run } = best.get(id)!;
      console.log(`| ${name} | ${Math.round(cpu)} | ${againstOff(cpu, off)} | ${Math.round(perSecond)} | ${run} |`);
    }
  }
}
