/**
 * Diagnostic A/B for the HTTP section (p99): Herald builds from several source trees (or one tree
 * with different node flags) and the raw loop, on the same PostgreSQL schema and rows, trials taking turns
 * (raw, A, B, raw, A, B, …) under the same background load. Per trial: req/s, p50/p99, server CPU/request,
 * and from each Herald process (bench/src/http-gc-preload.cjs) its garbage collections during the trial:
 * scavenges and full GCs per 1,000 requests and their pauses, bytes promoted to old space per request,
 * new-space bytes allocated per request, event-loop delay.
 *
 *   node --import tsx bench/src/http-ab.ts --target A=.:--max-semi-space-size=8 \
 *     --target B=/tmp/herald-base:--max-semi-space-size=8 [--env B:KEY=VALUE] [--trials 6] [--trial-ms 3000] \
 *     [--operation posts|me|createPost|publishPost]
 *
 * A target is NAME=ROOT[:node flags separated by commas]; ROOT is a Herald source tree with its packages
 * installed. Not part of `pnpm bench` (diagnostics only; the results are printed, not written).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { copyFileSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import {
  cleanupAll,
  Histogram,
  installExitHandlers,
  median,
  procSample,
  ROOT,
  round,
  sleep,
  spawnTracked,
  stopChild,
  TSX_IMPORT,
  track,
  UNLIMITED_TENANT_QUOTAS,
} from './common.js';
import type { HttpLoadCommand, HttpLoadResult } from './http-load.js';
import type { HttpOperation } from './http-sql.js';
import { BENCH_AUTHOR, BENCH_TAGS } from './protocol.js';
import { startHeraldTarget } from './targets.js';

const PRELOAD = fileURLToPath(new URL('./http-gc-preload.cjs', import.meta.url));
const LOAD_CLIENT = fileURLToPath(new URL('./http-load.ts', import.meta.url));

interface GcSummary {
  /** With HTTP_PHASES=1 (see http-gc-preload.cjs). */
  phases?: Record<'serverMs' | 'poolWaitMs', { n: number; p50: number; p99: number; max: number }>;
  kinds: Record<string, { count: number; ms: number; maxMs: number }>;
  promotedBytes: number;
  newSpaceAllocatedBytes: number;
  loopDelayMs: { p50: number; p99: number; max: number };
}

interface Trial {
  reqPerSec: number;
  p50: number;
  p99: number;
  cpuUs: number;
  gc?: GcSummary;
  requests: number;
}

function args() {
  const targets: Array<{ name: string; root: string; flags: string[]; env: Record<string, string> }> = [];
  let trials = 6;
  let trialMs = 3000;
  let operation: HttpOperation = 'posts';
  let connections = 64;
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const value = argv[++i]!;
    switch (argv[i - 1]) {
      case '--target': {
        const [name, rest] = value.split(/=(.*)/s) as [string, string];
        const [root, flags = ''] = rest.split(/:(.*)/s) as [string, string?];
        targets.push({ name, root: resolve(root), flags: flags.split(',').filter(Boolean), env: {} });
        break;
      }
      case '--env': {
        // NAME:KEY=VALUE, for the target NAME given before it.
        const [name, pair] = value.split(/:(.*)/s) as [string, string | undefined];
        if (pair === undefined) throw new Error(`--env ${value}: expected NAME:KEY=VALUE`);
        const [key, setting = ''] = pair.split(/=(.*)/s) as [string, string?];
        const target = targets.find((candidate) => candidate.name === name);
        if (!target) throw new Error(`--env ${value}: no target ${name} before it`);
        target.env[key] = setting;
        break;
      }
      case '--trials':
        trials = Number(value);
        break;
      case '--trial-ms':
        trialMs = Number(value);
        break;
      case '--operation':
        operation = value as HttpOperation;
        break;
      case '--connections':
        connections = Number(value);
        break;
      default:
        throw new Error(`unknown option ${argv[i - 1]}`);
    }
  }
  return { targets, trials, trialMs, operation, connections };
}

async function listening(child: ChildProcess, port: number): Promise<void> {
  for (let k = 0; k < 600; k++) {
    if (child.exitCode !== null) throw new Error(`exited with ${child.exitCode}`);
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) return;
    } catch {}
    await sleep(100);
  }
  throw new Error('did not start');
}

async function main() {
  installExitHandlers();
  const config = args();
  const databaseUrl = process.env.DATABASE_URL!;
  // The schema, the token and the rows: a Herald from this tree, left idle.
  const host = await startHeraldTarget({
    pods: 1,
    pubsub: 'memory',
    databaseUrl,
    database: 'postgres',
    env: { LOG_LEVEL: 'warn', ...UNLIMITED_TENANT_QUOTAS },
    label: 'http-ab',
    inspect: false,
  });
  const pool = new pg.Pool({ connectionString: host.env.DATABASE_URL!, max: 2 });
  // publishPost: each trial gets fresh drafts (set-up, not measured), enough for 20,000 req/s.
  const drafts = async (durationMs: number): Promise<string[] | undefined> => {
    if (config.operation !== 'publishPost') return undefined;
    const { rows } = await pool.query<{ id: string }>(
      `insert into posts (id, org_id, author_id, title, tags)
       select gen_random_uuid()::text, $1, $2, 'Draft ' || g, $3 from generate_series(1, $4::int) g returning id`,
      [host.orgId, BENCH_AUTHOR.id, BENCH_TAGS, Math.ceil(durationMs * 20) + 200],
    );
    return rows.map((row) => row.id);
  };
  await pool.query(
    `insert into posts (id, org_id, author_id, title, tags)
     select gen_random_uuid()::text, $1, $2, 'Seeded post ' || g, $3 from generate_series(1, 100) g`,
    [host.orgId, BENCH_AUTHOR.id, BENCH_TAGS],
  );
  const servers: Array<{ name: string; child: ChildProcess; origin: string; statsFile?: string }> = [];
  let port = 40_000 + Math.floor(Math.random() * 10_000);
  {
    // With HTTP_PHASES=1 the raw loop gets the preload too, for its in-process and pool-wait times.
    const statsFile = process.env.HTTP_PHASES === '1' ? join(tmpdir(), `http-ab-${process.pid}-raw.json`) : undefined;
    const raw = spawnTracked(process.execPath, ['--import', TSX_IMPORT, 'bench/src/http-raw-server.ts'], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '',
        NODE_ENV: 'production',
        PORT: String(++port),
        DATABASE_URL: host.env.DATABASE_URL!,
        JWT_SECRET: host.env.JWT_SECRET!,
        ...(statsFile ? { NODE_OPTIONS: `--require ${PRELOAD}`, HTTP_GC_STATS_FILE: statsFile, HTTP_PHASES: '1' } : {}),
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    await sleep(1500);
    servers.push({ name: 'raw', child: raw, origin: `http://127.0.0.1:${port}`, ...(statsFile ? { statsFile } : {}) });
  }
  for (const target of config.targets) {
    const statsFile = join(tmpdir(), `http-ab-${process.pid}-${target.name}.json`);
    const child = spawnTracked(process.execPath, [...target.flags, '--import', TSX_IMPORT, 'apps/api/src/main.ts'], {
      cwd: target.root,
      env: {
        ...host.env,
        PATH: process.env.PATH ?? '',
        HOST: '127.0.0.1',
        PORT: String(++port),
        MALLOC_ARENA_MAX: '1',
        NODE_OPTIONS: `--require ${PRELOAD}`,
        HTTP_GC_STATS_FILE: statsFile,
        ...(process.env.HTTP_PHASES ? { HTTP_PHASES: process.env.HTTP_PHASES } : {}),
        ...(process.env.HTTP_HEAP_PROFILE ? { HTTP_HEAP_PROFILE: process.env.HTTP_HEAP_PROFILE } : {}),
        ...target.env,
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    await listening(child, port);
    servers.push({ name: target.name, child, origin: `http://127.0.0.1:${port}`, statsFile });
  }
  const load = track(
    fork(LOAD_CLIENT, [], {
      cwd: ROOT,
      execArgv: ['--import', TSX_IMPORT],
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    }),
  );
  const ask = (command: HttpLoadCommand) =>
    new Promise<HttpLoadResult>((done) => {
      load.once('message', (reply) => done(reply as HttpLoadResult));
      load.send(command);
    });
  const runOnce = async (server: (typeof servers)[number], durationMs: number): Promise<Trial> => {
    const pid = server.child.pid!;
    // Set-up first: the GC-stats window (SIGUSR2) covers the trial only.
    const ids = await drafts(durationMs);
    if (server.statsFile) {
      rmSync(server.statsFile, { force: true });
      process.kill(pid, 'SIGUSR2');
    }
    const before = procSample(pid).cpuUs;
    const result = await ask({
      ...(ids ? { ids } : {}),
      type: 'run',
      origin: server.origin,
      connections: config.connections,
      durationMs,
      operation: config.operation,
      token: host.token,
      orgId: host.orgId,
      userId: BENCH_AUTHOR.id,
    });
    const cpuUs = procSample(pid).cpuUs - before;
    let gc: GcSummary | undefined;
    if (server.statsFile) {
      process.kill(pid, 'SIGUSR2');
      for (let k = 0; k < 50 && gc === undefined; k++) {
        await sleep(50);
        try {
          gc = JSON.parse(readFileSync(server.statsFile, 'utf8')) as GcSummary;
        } catch {}
      }
    }
    if (gc && process.env.HTTP_HEAP_PROFILE) {
      try {
        copyFileSync(`${server.statsFile}.heapprofile`, join(tmpdir(), `http-ab-${server.name}.heapprofile`));
      } catch {}
    }
    if (result.failures) console.log(`  ${server.name}: ${result.failures} failures: ${result.firstFailure}`);
    await sleep(500);
    const latency = Histogram.from(result.latency).summaryMs();
    return {
      reqPerSec: Math.round((result.requests / result.durationMs) * 1000),
      p50: latency.p50Ms,
      p99: latency.p99Ms,
      cpuUs: round(cpuUs / Math.max(1, result.requests), 1),
      requests: result.requests,
      ...(gc ? { gc } : {}),
    };
  };
  const trials = new Map<string, Trial[]>(servers.map((server) => [server.name, []]));
  for (const server of servers) await runOnce(server, 2000);
  for (let k = 0; k < config.trials; k++) {
    for (const server of servers) {
      const trial = await runOnce(server, config.trialMs);
      trials.get(server.name)!.push(trial);
      console.log(`trial ${k + 1} ${server.name}: ${describe(trial)}`);
    }
  }
  const raw = trials.get('raw')!;
  console.log(`\nmedians over ${config.trials} trials (${config.operation}, ${config.connections} connections):`);
  for (const [name, list] of trials) {
    const ratio = median(list.map((trial, k) => trial.p99 / raw[k]!.p99));
    const cpuRatio = median(list.map((trial, k) => trial.cpuUs / raw[k]!.cpuUs));
    console.log(
      `${name.padEnd(8)} ${describe(medianTrial(list))}  p99×raw ${round(ratio, 2)} cpu×raw ${round(cpuRatio, 2)}  p99 per trial [${list.map((trial) => trial.p99).join(' ')}]`,
    );
  }
  await stopChild(load);
  for (const server of servers) await stopChild(server.child);
  await pool.end();
  await host.stop();
  await cleanupAll();
}

function medianTrial(list: Trial[]): Trial {
  const m = (pick: (trial: Trial) => number | undefined) => median(list.map((trial) => pick(trial) ?? 0));
  const kind = (name: string, field: 'count' | 'ms' | 'maxMs') => (trial: Trial) =>
    field === 'maxMs'
      ? trial.gc?.kinds[name]?.maxMs
      : ((trial.gc?.kinds[name]?.[field] ?? 0) * 1000) / Math.max(1, trial.requests);
  const gcKinds = ['Scavenge', 'MarkSweepCompact', 'MinorMarkSweep'];
  return {
    reqPerSec: m((trial) => trial.reqPerSec),
    p50: m((trial) => trial.p50),
    p99: m((trial) => trial.p99),
    cpuUs: m((trial) => trial.cpuUs),
    requests: 1000,
    ...(list[0]?.gc
      ? {
          gc: {
            kinds: Object.fromEntries(
              gcKinds.map((name) => [
                name,
                { count: m(kind(name, 'count')), ms: m(kind(name, 'ms')), maxMs: m(kind(name, 'maxMs')) },
              ]),
            ),
            promotedBytes: m((trial) => (trial.gc!.promotedBytes / trial.requests) * 1000),
            newSpaceAllocatedBytes: m((trial) => (trial.gc!.newSpaceAllocatedBytes / trial.requests) * 1000),
            loopDelayMs: {
              p50: m((trial) => trial.gc!.loopDelayMs.p50),
              p99: m((trial) => trial.gc!.loopDelayMs.p99),
              max: m((trial) => trial.gc!.loopDelayMs.max),
            },
          },
        }
      : {}),
  };
}

function describe(trial: Trial): string {
  const base = `${trial.reqPerSec} req/s p50 ${trial.p50} p99 ${trial.p99} ms ${trial.cpuUs} µs/req`;
  const { gc } = trial;
  if (!gc) return base;
  const per = 1000 / trial.requests;
  const parts = Object.entries(gc.kinds).map(
    ([name, kind]) =>
      `${name.replace('MarkSweepCompact', 'MSC').replace('Scavenge', 'scav')} ${round(kind.count * per, 1)}/1k ${round(kind.ms * per, 1)}ms/1k max ${round(kind.maxMs, 1)}`,
  );
  const phase = (label: string, p: { p50: number; p99: number; max: number }) =>
    `${label} p50 ${round(p.p50, 2)} p99 ${round(p.p99, 2)} max ${round(p.max, 1)} ms`;
  const phases = gc.phases
    ? ` | ${phase('in process', gc.phases.serverMs)}; ${phase('pool wait', gc.phases.poolWaitMs)}`
    : '';
  return `${base} | ${parts.join(', ')} | promoted ${round((gc.promotedBytes * per) / 1000, 1)} B/req alloc ${round((gc.newSpaceAllocatedBytes * per) / 1000, 1)} B/req? loop p99 ${round(gc.loopDelayMs.p99, 1)} max ${round(gc.loopDelayMs.max, 1)}${phases}`;
}

main().catch(async (error) => {
  console.error(error);
  await cleanupAll();
  process.exit(1);
});
