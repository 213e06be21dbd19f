/**
 * What a traced process pays around its sampled requests: two API processes (single mode, PostgreSQL)
 * served side by side with `posts(first: 10)`, both tracing with `parentbased_traceidratio` at ratio 0
 * (no request is sampled by the ratio), exporting OTLP/protobuf to a sink in this process. After a warm-up
 * phase, `phases` phases follow; each reads both processes' CPU (all threads, and the main thread apart)
 * over the same window, until one of them answered `requests`, and prints A's against B's. Before phase 2
 * (and every later one with `FIRST_SAMPLED_EVERY_PHASE=1`), process A alone gets `sampled` requests whose
 * `traceparent` says "sampled" (the parent-based sampler follows it), one after another; the phases
 * themselves carry no `traceparent`. So phase 1 compares two identical processes (the noise), and
 * the phases after it show whether the sampled requests left A paying more, and for how long.
 *   node --import tsx bench/micro/first-sampled.ts [requests=8000] [concurrency=16] [sampled=20] [phases=4]
 *
 * The environment varies the two processes (KEY=VALUE pairs, comma-separated):
 * - `FIRST_SAMPLED_ENV_A`: for A only, after the rest (`OTEL_TRACES_SAMPLER_ARG=0.01`: A samples by the
 *   ratio, B does not; `OTEL_BSP_SCHEDULE_DELAY=600000`: A never exports during the run);
 * - `FIRST_SAMPLED_ENV_BOTH`: for both (`NODE_OPTIONS=--require …`: a diagnostic preload);
 * - `FIRST_SAMPLED_B_OFF=1`: B with tracing off (no OTEL_* variable at all).
 * Bounded: a fixed count per phase, and each request times out. Results: bench/results/tracing/low-ratio-costs.md.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { signToken } from '@herald/auth';
import pg from 'pg';
import { Pool } from 'undici';
import { type ApiProcess, startApiProcess } from '../../test/support/api-process.js';
import { UNLIMITED_TENANT_QUOTAS } from '../src/common.js';
import { postsRequester, seedPostsThroughApi, sideBySideWindow, startOtlpSink } from '../src/tracing-settings.js';

const requests = Number(process.argv[2] ?? 8_000);
const concurrency = Number(process.argv[3] ?? 16);
const sampledCount = Number(process.argv[4] ?? 20);
const phases = Number(process.argv[5] ?? 4);
const JWT_SECRET = 'first-sampled-secret-0123456789abcdef';
const ORG = 'org-first-sampled';
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** `KEY=VALUE,KEY=VALUE` (a value may hold `=`, not `,`). */
function pairs(name: string): Record<string, string> {
  const entries: [string, string][] = [];
  for (const pair of (process.env[name] ?? '').split(',').filter(Boolean)) {
    const at = pair.indexOf('=');
    if (at <= 0) {
      console.error(`first-sampled: ${name} takes KEY=VALUE pairs separated by commas, got "${pair}"`);
      process.exit(2);
    }
    entries.push([pair.slice(0, at), pair.slice(at + 1)]);
  }
  return Object.fromEntries(entries);
}
const envA = pairs('FIRST_SAMPLED_ENV_A');
const envBoth = pairs('FIRST_SAMPLED_ENV_BOTH');

/** CPU µs of `pid`: all its threads, and its main thread (the one whose id is the process's). */
function cpuMicros(pid: number): { all: number; main: number } {
  const used = { all: 0, main: 0 };
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let line: string;
    try {
      line = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      continue; // a thread that ended meanwhile
    }
    const fields = line.slice(line.lastIndexOf(')') + 2).split(' ');
    // utime and stime (fields 14 and 15 of the whole line), in clock ticks of 10 ms.
    const micros = (Number(fields[11]) + Number(fields[12])) * 10_000;
    used.all += micros;
    if (tid === String(pid)) used.main += micros;
  }
  return used;
}

const sink = await startOtlpSink();
const token = await signToken(JWT_SECRET, { sub: 'bench', name: 'Bench', orgs: [ORG] });

/** One `posts(first: 10)` request to the process behind `pool`, checked (tracing-settings.ts). */
const requesters = new WeakMap<Pool, (traceparent?: string) => Promise<void>>();
function postsRequest(pool: Pool, traceparent?: string): Promise<void> {
  let request = requesters.get(pool);
  if (!request) {
    request = postsRequester(pool, token, ORG);
    requesters.set(pool, request);
  }
  return request(traceparent);
}

/** Both processes loaded at once; CPU per request of each over the window in which one answered `requests`. */
async function phase(apis: ApiProcess[], pools: Pool[]) {
  const window = await sideBySideWindow(pools, {
    concurrency,
    requests,
    request: (pool) => postsRequest(pool),
    sample: () => apis.map((api) => cpuMicros(api.child.pid as number)),
  });
  return window.after.map((used, i) => ({
    all: (used.all - window.before[i]!.all) / window.done[i]!,
    main: (used.main - window.before[i]!.main) / window.done[i]!,
  }));
}

// A schema of its own, dropped at the end.
const schemaName = `first_sampled_${process.pid}`;
const admin = new pg.Client({ connectionString: base });
await admin.connect();
await admin.query(`create schema ${schemaName}`);
const schemaUrl = new URL(base);
schemaUrl.searchParams.set('options', `-c search_path=${schemaName}`);
const common = { DATABASE_URL: schemaUrl.toString(), JWT_SECRET, ...UNLIMITED_TENANT_QUOTAS };
const traced = { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' };
// The sink counts exports per setting id in the path: A's go to `ratio-0.01`'s, B's to `ratio-1`'s.
const started = await Promise.allSettled([
  startApiProcess({ ...common, ...traced, OTEL_EXPORTER_OTLP_ENDPOINT: `${sink.url}/ratio-0.01`, ...envBoth, ...envA }),
  startApiProcess(
    process.env.FIRST_SAMPLED_B_OFF
      ? { ...common, ...envBoth }
      : { ...common, ...traced, OTEL_EXPORTER_OTLP_ENDPOINT: `${sink.url}/ratio-1`, ...envBoth },
  ),
]);
const apis = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
try {
  const failed = started.find((result) => result.status === 'rejected');
  if (failed) throw failed.reason;
  const pools = apis.map((api) => new Pool(api.baseUrl, { connections: concurrency }));
  try {
    await seedPostsThroughApi(pools[0]!, token, ORG);
    await phase(apis, pools); // warm-up
    console.log(
      `posts(first: 10), ${concurrency} in flight each, ${requests} per phase; A env ${JSON.stringify(envA)}, ` +
        `B ${process.env.FIRST_SAMPLED_B_OFF ? 'tracing off' : 'ratio 0'}, both ${JSON.stringify(envBoth)}; ` +
        `load average ${loadavg()
          .map((load) => load.toFixed(1))
          .join(' ')}`,
    );
    console.log(
      '| phase | sampled to A before it | A µs/req (main thread) | B µs/req (main thread) | A/B | A exported so far |',
    );
    console.log('| --- | --- | --- | --- | --- | --- |');
    for (let p = 1; p <= phases; p++) {
      const sampleNow = p === 2 || (p > 2 && process.env.FIRST_SAMPLED_EVERY_PHASE === '1');
      if (sampleNow) {
        for (let i = 0; i < sampledCount; i++)
          await postsRequest(pools[0]!, `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-01`);
        // Past the batch processor's schedule delay (5 s by default): their export is out before the phase.
        await new Promise((resolve) => setTimeout(resolve, 6_000));
      }
      const [a, b] = await phase(apis, pools);
      const exported = sink.received('ratio-0.01');
      console.log(
        `| ${p} | ${sampleNow ? sampledCount : 0} | ${a!.all.toFixed(0)} (${a!.main.toFixed(0)}) | ` +
          `${b!.all.toFixed(0)} (${b!.main.toFixed(0)}) | ${(a!.all / b!.all).toFixed(3)} | ` +
          `${exported.exports} exports, ${(exported.bytes / 1024).toFixed(0)} KiB |`,
      );
    }
  } finally {
    await Promise.all(pools.map((pool) => pool.close()));
  }
} finally {
  await Promise.all(apis.map((api) => api.stop('SIGTERM')));
  await admin.query(`drop schema ${schemaName} cascade`);
  await admin.end();
  await sink.close();
}
