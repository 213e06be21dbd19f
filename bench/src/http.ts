/**
 * `pnpm bench` HTTP section: queries and mutations over HTTP at 64 keep-alive connections,
 * Herald against a raw `node:http` + `pg` loop and stock Yoga, in one run, on the same PostgreSQL schema
 * and the same rows.
 *
 * Targets (each its own process, NODE_ENV=production; Herald with LOG_LEVEL=warn):
 * - `raw`: `http-raw-server.ts` (token verified with node:crypto, the same SQL, one JSON write);
 * - `herald`: apps/api in embedded pub/sub mode on PostgreSQL (the schema it migrates is the one all use),
 *   with the API container image's node flags (deploy/Dockerfile);
 * - `herald-start`: the same on its own schema (same rows) with `pnpm start`'s node flags (a smaller young
 *   generation for a small idle footprint), to price them in the same run;
 * - `yoga`: `http-yoga-server.ts` (stock Yoga, SDL + hand-written resolvers over the same SQL, jose);
 * - `herald-pglite`: apps/api on PGlite (the `pnpm start` default), whose own database is in process;
 * - `herald-yoga-path` (only when named): `herald` with HTTP_FAST_PATH=false, every request through Yoga
 *   (its own schema, same rows), to price the fast path (apps/api/src/http-fast-path.ts) in the same run.
 * Operations: `posts(first: 10)` with authors, `me`, `createPost`, `publishPost` (outbox row and the
 * in-process publish included). For each operation every target gets a warm-up, then the trials take
 * turns (raw, herald, yoga, …, raw, herald, …) so each ratio compares trials under the same background
 * load: "× raw" is the median of the per-trial ratios. Server CPU per request = the server process's CPU
 * (every thread, /proc schedstat) during the trial ÷ answered requests; PostgreSQL's own CPU is not in it.
 * One load-client process (`http-load.ts`) checks every answer.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import {
  Histogram,
  procSample,
  ROOT,
  round,
  type Spread,
  spawnTracked,
  spread,
  stopChild,
  TSX_IMPORT,
  track,
  UNLIMITED_TENANT_QUOTAS,
} from './common.js';
import type { HttpLoadCommand, HttpLoadResult } from './http-load.js';
import type { HttpOperation } from './http-sql.js';
import { type CpuProfile, type ProfileSummary, summariseProfile } from './profile.js';
import { BENCH_AUTHOR, BENCH_TAGS } from './protocol.js';
import { type HeraldTarget, imageRuntime, startHeraldTarget, startScriptRuntime } from './targets.js';

const LOAD_CLIENT = fileURLToPath(new URL('./http-load.ts', import.meta.url));
const RAW_SERVER = 'bench/src/http-raw-server.ts';
const YOGA_SERVER = 'bench/src/http-yoga-server.ts';
/** Drafts made for the first publishPost trial of a target (later trials size from the measured rate). */
const FIRST_DRAFTS = 6_000;
/** Drafts are made for this many times the rate the target reached before (never run out mid-trial: a
 * target warming up can more than double its rate from one trial to the next). */
const DRAFT_HEADROOM = 3;
/** After a trial, its server is given up to this long to finish leftover work before the next target's turn. */
const SETTLE_MAX_MS = 3_000;
/** A server using less than this share of a core over one {@link SETTLE_WINDOW_MS} counts as idle. */
const SETTLE_IDLE_SHARE = 0.05;
const SETTLE_WINDOW_MS = 100;

export type HttpTargetId = 'raw' | 'herald' | 'herald-start' | 'herald-yoga-path' | 'yoga' | 'herald-pglite';
/** The default targets; `herald-yoga-path` (Herald with HTTP_FAST_PATH=false) only when asked for. */
export const HTTP_TARGETS: HttpTargetId[] = ['raw', 'herald', 'herald-start', 'yoga', 'herald-pglite'];
/** The order trials take turns in (and the rows are listed in). */
const TARGET_ORDER: HttpTargetId[] = ['raw', 'herald', 'herald-start', 'herald-yoga-path', 'yoga', 'herald-pglite'];
export const HTTP_OPERATION_IDS: HttpOperation[] = ['posts', 'me', 'createPost', 'publishPost'];

const LABELS: Record<HttpTargetId, string> = {
  raw: 'raw node:http + pg',
  herald: 'Herald (PostgreSQL)',
  'herald-start': 'Herald (PostgreSQL), `pnpm start` node flags',
  'herald-yoga-path': 'Herald, HTTP_FAST_PATH=false',
  yoga: 'stock Yoga, same SQL',
  'herald-pglite': 'Herald embedded (PGlite)',
};

export interface HttpConfig {
  /** PostgreSQL; without it only `herald-pglite` runs. */
  databaseUrl: string | undefined;
  targets: HttpTargetId[];
  operations: HttpOperation[];
  /** Keep-alive connections, each with one request in flight. @default 64 */
  connections: number;
  trials: number;
  trialMs: number;
  warmupMs: number;
  /** Posts in the organisation before the run (the `posts` page reads the newest 10). */
  seedPosts: number;
  /** Extra environment for the Herald processes. */
  heraldEnv: Record<string, string>;
  log: (line: string) => void;
  /** A deliberate error of the raw server for the smoke test (see http-raw-server.ts); never in a measurement. */
  rawFault?: 'wrong-me';
  /** Write a CPU profile of each Herald process here (`node --cpu-prof`) and summarise it per operation. */
  profileDir?: string;
}

export interface HttpProfile {
  target: HttpTargetId;
  operation: HttpOperation;
  cpuUsPerRequest: number;
  summary: ProfileSummary;
}

export interface HttpTrial {
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  cpuUsPerRequest: number;
  requests: number;
  failures: number;
  exhausted: boolean;
}

export interface HttpRow {
  target: HttpTargetId;
  label: string;
  operation: HttpOperation;
  trials: HttpTrial[];
  reqPerSec: Spread;
  p50Ms: number;
  p99Ms: number;
  cpuUsPerRequest: Spread;
  failures: number;
  firstFailure?: string;
  /** Median of per-trial ratios to the raw loop (PGlite rows too: raw runs on PostgreSQL). */
  vsRaw: { reqPerSec: number | null; p99: number | null; cpu: number | null };
  vsYoga: { reqPerSec: number | null };
}

export interface HttpResult {
  connections: number;
  trials: number;
  trialMs: number;
  rows: HttpRow[];
  skipped: string[];
  notes: string[];
  /** With `profileDir`: where each Herald target's CPU went, per operation (trial windows only). */
  profiles?: HttpProfile[];
}

interface Server {
  id: HttpTargetId;
  origin: string;
  pids: number[];
  token: string;
  orgId: string;
  /** Makes `count` drafts to publish. */
  drafts(count: number): Promise<string[]>;
  stop(): Promise<void>;
  /** The directory its CPU profile is written to when it stops (Herald with `profileDir`). */
  profileDir?: string;
}

async function startScript(
  script: string,
  env: Record<string, string>,
): Promise<{ child: ChildProcess; port: number }> {
  const child = spawnTracked(process.execPath, ['--import', TSX_IMPORT, script], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', NODE_ENV: 'production', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-2000);
  });
  const port = await new Promise<number>((resolve, reject) => {
    let buffered = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const match = /listening (\d+)/.exec(buffered);
      if (match) resolve(Number(match[1]));
    });
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code}: ${stderr}`)));
  });
  return { child, port };
}

/** Bulk drafts straight into PostgreSQL (set-up, not measured). */
async function insertDrafts(pool: pg.Pool, orgId: string, count: number, title: string): Promise<string[]> {
  const { rows } = await pool.query<{ id: string }>(
    `insert into posts (id, org_id, author_id, title, tags)
     select gen_random_uuid()::text, $1, $2, $3 || g, $4 from generate_series(1, $5::int) g returning id`,
    [orgId, BENCH_AUTHOR.id, title, BENCH_TAGS, count],
  );
  return rows.map((row) => row.id);
}

function heraldServer(
  id: HttpTargetId,
  herald: HeraldTarget,
  extra: () => Promise<void>,
  profileDir: string | undefined,
): Server {
  const origin = herald.wsUrls[0]!.replace(/^ws:/, 'http:').replace(/\/graphql$/, '');
  return {
    id,
    origin,
    pids: herald.pids,
    token: herald.token,
    orgId: herald.orgId,
    drafts: async (count) => (await herald.prepareEvents(count)).map((event) => event.postId),
    ...(profileDir ? { profileDir } : {}),
    async stop() {
      await extra();
      await herald.stop();
    },
  };
}

export async function runHttp(config: HttpConfig): Promise<HttpResult> {
  const { log } = config;
  const skipped: string[] = [];
  const servers: Server[] = [];
  const heraldEnv = { LOG_LEVEL: 'warn', ...UNLIMITED_TENANT_QUOTAS, ...config.heraldEnv };
  const load = forkLoadClient();
  let pool: pg.Pool | undefined;
  try {
    const wantsPostgres = config.targets.some((id) => id !== 'herald-pglite');
    /** A Herald beside the main one, on its own schema with the same rows (drafts inserted directly). */
    const startSideHerald = async (
      id: 'herald-yoga-path' | 'herald-start',
      env: Record<string, string>,
      runtime: 'image' | 'start-script',
    ) => {
      const profileDir = profileDirFor(config, id);
      const side = await startHeraldTarget({
        pods: 1,
        pubsub: 'memory',
        databaseUrl: config.databaseUrl,
        database: 'postgres',
        env,
        label: `http-${id}`,
        inspect: false,
        runtime,
        ...(profileDir ? { cpuProfDir: profileDir } : {}),
      });
      const sidePool = new pg.Pool({ connectionString: side.env.DATABASE_URL!, max: 2 });
      servers.push({
        ...heraldServer(id, side, () => sidePool.end(), profileDir),
        drafts: (count) => insertDrafts(sidePool, side.orgId, count, 'Draft '),
      });
      await insertDrafts(sidePool, side.orgId, config.seedPosts, 'Seeded post ');
    };
    if (wantsPostgres && config.databaseUrl) {
      // Every request through Yoga (HTTP_FAST_PATH=false), to price the fast path in the same run.
      if (config.targets.includes('herald-yoga-path'))
        await startSideHerald('herald-yoga-path', { ...heraldEnv, HTTP_FAST_PATH: 'false' }, 'image');
      // `pnpm start`'s node flags (a small idle footprint on a laptop: `--max-semi-space-size=8`,
      // `MALLOC_ARENA_MAX=1`).
      if (config.targets.includes('herald-start')) await startSideHerald('herald-start', heraldEnv, 'start-script');
    }
    if (wantsPostgres && !config.databaseUrl) {
      skipped.push('HTTP: raw, herald and yoga need DATABASE_URL');
    } else if (wantsPostgres) {
      // Herald migrates the schema; the raw loop and stock Yoga use the same schema, rows and secret.
      const profileDir = profileDirFor(config, 'herald');
      const herald = await startHeraldTarget({
        pods: 1,
        pubsub: 'memory',
        databaseUrl: config.databaseUrl,
        database: 'postgres',
        env: heraldEnv,
        label: 'http',
        inspect: false,
        // The server tenants hit: the container image's node flags (deploy/Dockerfile), as raw and stock
        // Yoga run node's defaults too. `herald-start` is the same server with `pnpm start`'s flags.
        runtime: 'image',
        ...(profileDir ? { cpuProfDir: profileDir } : {}),
      });
      const url = herald.env.DATABASE_URL!;
      pool = new pg.Pool({ connectionString: url, max: 4 });
      const drafts = (count: number) => insertDrafts(pool!, herald.orgId, count, 'Draft ');
      await insertDrafts(pool, herald.orgId, config.seedPosts, 'Seeded post ');
      const baselineEnv = {
        DATABASE_URL: url,
        JWT_SECRET: herald.env.JWT_SECRET!,
        ...(config.rawFault ? { RAW_FAULT: config.rawFault } : {}),
      };
      const pending: Array<Promise<void>> = [];
      for (const id of config.targets) {
        if (id === 'herald') {
          servers.push({ ...heraldServer('herald', herald, async () => {}, profileDir), drafts });
        } else if (id === 'raw' || id === 'yoga') {
          pending.push(
            startScript(id === 'raw' ? RAW_SERVER : YOGA_SERVER, baselineEnv).then(({ child, port }) => {
              servers.push({
                id,
                origin: `http://127.0.0.1:${port}`,
                pids: [child.pid!],
                token: herald.token,
                orgId: herald.orgId,
                drafts,
                stop: () => stopChild(child),
              });
            }),
          );
        }
      }
      await Promise.all(pending);
      if (!config.targets.includes('herald'))
        servers.push({ ...heraldServer('herald', herald, async () => {}, undefined) });
    }
    if (config.targets.includes('herald-pglite')) {
      const profileDir = profileDirFor(config, 'herald-pglite');
      const embedded = await startHeraldTarget({
        pods: 1,
        pubsub: 'memory',
        databaseUrl: undefined,
        database: 'pglite',
        env: heraldEnv,
        label: 'http-pglite',
        inspect: false,
        ...(profileDir ? { cpuProfDir: profileDir } : {}),
      });
      const server = heraldServer('herald-pglite', embedded, async () => {}, profileDir);
      servers.push(server);
      log('  herald-pglite: seeding posts over createPost');
      await embedded.prepareEvents(config.seedPosts);
    }
    // A fixed order (raw first) makes the per-trial pairs; a Herald started only to migrate is not measured.
    const measured = TARGET_ORDER.filter((id) => config.targets.includes(id))
      .map((id) => servers.find((server) => server.id === id))
      .filter((server): server is Server => server !== undefined);

    const rows: HttpRow[] = [];
    const lastRate = new Map<HttpTargetId, number>();
    const firstFailures = new Map<string, string>();
    const windows = new Map<string, Array<[number, number]>>();
    const runOnce = async (server: Server, operation: HttpOperation, durationMs: number): Promise<HttpTrial> => {
      let ids: string[] | undefined;
      if (operation === 'publishPost') {
        const rate = lastRate.get(server.id);
        // Never fewer than the first trial's: a trial slowed by other load on the machine would otherwise
        // size the next one too small (seen in CI: a short trial ran out after a stalled one).
        const count = Math.max(FIRST_DRAFTS, rate ? Math.ceil((rate * DRAFT_HEADROOM * durationMs) / 1000) + 200 : 0);
        ids = await server.drafts(count);
      }
      const before = procSample(server.pids[0]!).cpuUs;
      const startedUs = monotonicUs();
      const result = await load.ask<HttpLoadResult>({
        type: 'run',
        origin: server.origin,
        connections: config.connections,
        durationMs,
        operation,
        token: server.token,
        orgId: server.orgId,
        userId: BENCH_AUTHOR.id,
        ...(ids ? { ids } : {}),
      } satisfies HttpLoadCommand);
      const cpuUs = procSample(server.pids[0]!).cpuUs - before;
      // Work a trial leaves behind (relays, webhook engine, GC) must not eat into the next target's trial.
      await settle(server.pids);
      if (durationMs === config.trialMs) {
        const key = `${server.id}/${operation}`;
        windows.set(key, [...(windows.get(key) ?? []), [startedUs, monotonicUs()]]);
      }
      const latency = Histogram.from(result.latency).summaryMs();
      const reqPerSec = Math.round((result.requests / Math.max(1, result.durationMs)) * 1000);
      if (operation === 'createPost' || operation === 'publishPost') lastRate.set(server.id, reqPerSec);
      if (result.failures > 0 && result.firstFailure) {
        const key = `${server.id}/${operation}`;
        if (!firstFailures.has(key)) firstFailures.set(key, result.firstFailure);
        log(`  ${server.id} ${operation}: ${result.failures} failed answers, first: ${result.firstFailure}`);
      }
      return {
        reqPerSec,
        p50Ms: latency.p50Ms,
        p99Ms: latency.p99Ms,
        cpuUsPerRequest: round(cpuUs / Math.max(1, result.requests), 1),
        requests: result.requests,
        failures: result.failures,
        exhausted: result.exhausted,
      };
    };

    for (const operation of config.operations) {
      const byTarget = new Map<HttpTargetId, HttpTrial[]>(measured.map((server) => [server.id, []]));
      for (const server of measured) {
        log(`http ${operation}: warm-up ${server.id}`);
        await runOnce(server, operation, config.warmupMs);
      }
      for (let k = 0; k < config.trials; k++) {
        for (const server of measured) {
          const trial = await runOnce(server, operation, config.trialMs);
          byTarget.get(server.id)!.push(trial);
          log(
            `http ${operation} trial ${k + 1}/${config.trials} ${server.id}: ${trial.reqPerSec} req/s, p99 ${trial.p99Ms} ms, ${trial.cpuUsPerRequest} µs CPU/request${trial.failures ? `, ${trial.failures} FAILED` : ''}${trial.exhausted ? ', ran out of drafts' : ''}`,
          );
        }
      }
      for (const server of measured) {
        const trials = byTarget.get(server.id)!;
        rows.push({
          target: server.id,
          label: LABELS[server.id],
          operation,
          trials,
          reqPerSec: spread(trials.map((trial) => trial.reqPerSec)),
          p50Ms: round(spread(trials.map((trial) => trial.p50Ms)).median, 2),
          p99Ms: round(spread(trials.map((trial) => trial.p99Ms)).median, 2),
          cpuUsPerRequest: roundSpread(spread(trials.map((trial) => trial.cpuUsPerRequest))),
          failures: trials.reduce((sum, trial) => sum + trial.failures, 0),
          ...(firstFailures.has(`${server.id}/${operation}`)
            ? { firstFailure: firstFailures.get(`${server.id}/${operation}`)! }
            : {}),
          vsRaw: { reqPerSec: null, p99: null, cpu: null },
          vsYoga: { reqPerSec: null },
        });
      }
    }
    const profiles: HttpProfile[] = [];
    for (const server of measured) {
      if (!server.profileDir) continue;
      await server.stop();
      servers.splice(servers.indexOf(server), 1);
      const file = readdirSync(server.profileDir).find((name) => name.endsWith('.cpuprofile'));
      if (!file) throw new Error(`${server.id}: no .cpuprofile was written`);
      const data = JSON.parse(readFileSync(join(server.profileDir, file), 'utf8')) as CpuProfile;
      for (const operation of config.operations) {
        const row = rows.find((candidate) => candidate.target === server.id && candidate.operation === operation);
        profiles.push({
          target: server.id,
          operation,
          cpuUsPerRequest: row?.cpuUsPerRequest.median ?? Number.NaN,
          summary: summariseProfile(data, windows.get(`${server.id}/${operation}`) ?? []),
        });
      }
    }
    return {
      ...(config.profileDir ? { profiles } : {}),
      connections: config.connections,
      trials: config.trials,
      trialMs: config.trialMs,
      rows: withHttpRatios(rows),
      skipped,
      notes: [
        `${config.connections} keep-alive connections (undici Pool, one request in flight each), one load-client process; every answer checked (HTTP 200, no errors; one in 8 parsed and compared field by field). Warm-up ${config.warmupMs} ms per target and operation, then ${config.trials} trials of ${config.trialMs} ms taking turns; after each trial its server gets up to ${SETTLE_MAX_MS / 1000} s to go idle (under ${SETTLE_IDLE_SHARE * 100} % of a core) before the next one starts.`,
        `Herald: apps/api, NODE_ENV=production, ${Object.entries(heraldEnv)
          .map(([key, value]) => `${key}=${value}`)
          .join(
            ' ',
          )}, in-memory pub/sub, pool of 10; "Herald (PostgreSQL)" runs with the API container image's node flags (${
          imageRuntime().nodeFlags.join(' ') || 'none'
        }: on this host the young generation node gives raw and stock Yoga by itself; the HTTP_FAST_PATH=false row runs with them too), the \`pnpm start\` row with the start script's (${[
          ...Object.entries(startScriptRuntime().env).map(([key, value]) => `${key}=${value}`),
          ...startScriptRuntime().nodeFlags,
        ].join(
          ' ',
        )}: a smaller young generation for a small idle footprint on a laptop), as does the PGlite row. Raw and stock Yoga: pool of 10, the same schema, rows and HS256 secret; SQL in bench/src/http-sql.ts, the same statements as Herald (posts: one join; createPost: author upsert + insert in one statement; publishPost: update + outbox row in one statement).`,
        'Server CPU/request: the server process only (every thread); PostgreSQL backends are not counted. PGlite runs inside Herald, so its row includes the database; its "× raw" compares with the raw loop on PostgreSQL.',
      ],
    };
  } finally {
    await Promise.allSettled(servers.map((server) => server.stop()));
    await pool?.end();
    await stopChild(load.child);
  }
}

/** Each row's per-trial ratios to the raw loop and stock Yoga of the same operation. */
export function withHttpRatios(rows: HttpRow[]): HttpRow[] {
  const paired = (a: HttpTrial[], b: HttpTrial[] | undefined, pick: (trial: HttpTrial) => number) => {
    if (!b || b.length !== a.length || a.length === 0) return null;
    const ratios = a.map((trial, k) => pick(trial) / pick(b[k]!)).filter(Number.isFinite);
    return ratios.length ? round(spread(ratios).median, 2) : null;
  };
  return rows.map((row) => {
    const raw = rows.find((candidate) => candidate.target === 'raw' && candidate.operation === row.operation);
    const yoga = rows.find((candidate) => candidate.target === 'yoga' && candidate.operation === row.operation);
    return {
      ...row,
      vsRaw: {
        reqPerSec: paired(row.trials, raw?.trials, (trial) => trial.reqPerSec),
        p99: paired(row.trials, raw?.trials, (trial) => trial.p99Ms),
        cpu: paired(row.trials, raw?.trials, (trial) => trial.cpuUsPerRequest),
      },
      vsYoga: { reqPerSec: paired(row.trials, yoga?.trials, (trial) => trial.reqPerSec) },
    };
  });
}

/** The HTTP section of results.md. */
export function httpMarkdown(result: HttpResult | null | undefined): string {
  if (!result) return '';
  const lines = [
    '## HTTP: queries and mutations',
    '',
    '| operation | server | req/s (median, min–max) | p50 ms | p99 ms | server CPU µs/request | × raw req/s | × raw p99 | × stock Yoga req/s | failed |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const x = (value: number | null) => (value === null ? '–' : `${value}×`);
  for (const row of result.rows) {
    lines.push(
      `| ${row.operation} | ${row.label} | ${row.reqPerSec.median} (${row.reqPerSec.min}–${row.reqPerSec.max}) | ${row.p50Ms} | ${row.p99Ms} | ${row.cpuUsPerRequest.median} | ${row.target === 'raw' ? '1×' : x(row.vsRaw.reqPerSec)} | ${row.target === 'raw' ? '1×' : x(row.vsRaw.p99)} | ${row.target === 'yoga' ? '1×' : x(row.vsYoga.reqPerSec)} | ${row.failures}${row.firstFailure ? ` (${row.firstFailure.slice(0, 80).replaceAll('|', '/')})` : ''} |`,
    );
  }
  lines.push('', ...result.notes.map((note) => `- ${note}`));
  if (result.skipped.length) lines.push(...result.skipped.map((line) => `- skipped: ${line}`));
  return `${lines.join('\n')}\n`;
}

/**
 * Waits (at most SETTLE_MAX_MS) until the processes use under SETTLE_IDLE_SHARE of a core over a window:
 * a target still working off a trial (history relay, in-process webhook engine) would otherwise take CPU
 * from the next target's trial on this shared machine.
 */
async function settle(pids: readonly number[]): Promise<void> {
  const deadline = Date.now() + SETTLE_MAX_MS;
  const cpuOf = () => pids.reduce((sum, pid) => sum + procSample(pid).cpuUs, 0);
  while (Date.now() < deadline) {
    const before = cpuOf();
    await new Promise((resolve) => setTimeout(resolve, SETTLE_WINDOW_MS));
    if (cpuOf() - before < SETTLE_WINDOW_MS * 1_000 * SETTLE_IDLE_SHARE) return;
  }
}

const roundSpread = (value: Spread): Spread => ({ ...value, median: round(value.median, 1) });
const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);

function profileDirFor(config: HttpConfig, id: HttpTargetId): string | undefined {
  if (!config.profileDir || !config.targets.includes(id)) return undefined;
  const dir = join(config.profileDir, id);
  mkdirSync(dir, { recursive: true });
  return dir;
}

/**
 * bench/results/profiles/http-cpu.md (`--http-profile`, rewritten whole): per operation and Herald target, the
 * server CPU per request split by package and the functions with the most self time (share of profiled busy
 * time × measured µs/request).
 */
export function httpProfileMarkdown(profiles: HttpProfile[], command: string, header: string[]): string {
  const lines = [
    '# HTTP: where Herald spends its CPU per request',
    '',
    `- Command: \`${command}\` — \`node --cpu-prof\` on the Herald process; only samples inside the trials count.`,
    ...header.map((line) => `- ${line}`),
    '',
  ];
  const us = (pct: number, cpu: number) => round((pct * cpu) / 100, 0);
  for (const profile of profiles) {
    const { summary, cpuUsPerRequest: cpu } = profile;
    lines.push(
      `### ${profile.operation} — ${LABELS[profile.target]}: ${cpu} µs CPU/request (profiler on)`,
      '',
      `By package: ${summary.byPackage
        .slice(0, 10)
        .map((row) => `${row.name} ${us(row.pct, cpu)} µs (${row.pct}%)`)
        .join('; ')}.`,
      '',
      '| top functions (self) | µs/request | % |',
      '|---|---:|---:|',
      ...summary.topFunctions
        .slice(0, 12)
        .map((row) => `| ${row.name.replaceAll('|', '\\|')} | ${us(row.pct, cpu)} | ${row.pct} |`),
      '',
    );
  }
  return `${lines.join('\n')}\n`;
}

interface IpcChild {
  child: ChildProcess;
  ask<T>(message: unknown): Promise<T>;
}

function forkLoadClient(): IpcChild {
  const child = track(
    fork(LOAD_CLIENT, [], {
      cwd: ROOT,
      execArgv: ['--import', TSX_IMPORT],
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    }),
  );
  let waiting: { resolve: (reply: any) => void; reject: (error: Error) => void } | undefined;
  child.on('message', (reply) => {
    const pending = waiting;
    waiting = undefined;
    pending?.resolve(reply);
  });
  child.once('exit', (code) => waiting?.reject(new Error(`HTTP load client exited with ${code}`)));
  return {
    child,
    ask: (message) =>
      new Promise((resolve, reject) => {
        waiting = { resolve, reject };
        child.send(message as never);
      }),
  };
}
