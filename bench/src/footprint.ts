/**
 * `pnpm bench` embedded footprint: what a new user's `pnpm start` costs. The very command
 * `pnpm start` runs (the `start` script of package.json, through `sh -c` as pnpm runs it: rebuild the
 * console and the API bundle when stale, then `node apps/api/dist/main.js`; no DATABASE_URL, no
 * REDIS_URL: embedded mode on PGlite, in-process dispatcher) is started twice on one fresh data
 * directory: the first start creates the database (a copy of the embedded template the build step made,
 * see packages/db/src/embedded-template.ts), the second reopens it. Before them the script's build step
 * runs alone, as the first `pnpm start` after a change of the sources or migrations runs it: its time and
 * what it rebuilt are reported apart (it is not paid again until those change).
 * Reported: milliseconds from spawn to the "herald api listening" log line (the build checks included;
 * pnpm's own start-up, ~0.3 s, is not), and the API process's RSS after `IDLE_MS` of idling.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { procSample, ROOT, round, sleep, spawnTracked, stopChild, wallNow } from './common.js';

/** Idle time before RSS is read. */
const IDLE_MS = 3_000;
/** A start that takes longer than this is reported as failed. */
const START_TIMEOUT_MS = 120_000;

export interface FootprintStart {
  start: 'first (creates the database)' | 'second (reopens it)';
  readyMs: number;
  idleRssMiB: number;
}

export interface FootprintResult {
  command: string;
  /** The start script's build step run alone before the starts: its time and what it printed (what it built). */
  build?: { ms: number; output: string };
  starts: FootprintStart[];
  error?: string;
}

/** The `start` script of package.json: what `pnpm start` runs. */
const START_SCRIPT = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } })
  .scripts.start;
/** The start script's build step (everything before the last `&&`): rebuilds what is stale. */
const BUILD_STEP = START_SCRIPT.slice(0, START_SCRIPT.lastIndexOf(' && '));
/** How the API process shows in its command line (the last step of the start script). */
const API_PROCESS = 'apps/api/dist/main.js';

/** The pid of the descendant of `pid` whose command line contains `needle`, if any. */
function findDescendant(pid: number, needle: string): number | undefined {
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    let children: number[];
    try {
      children = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
    } catch {
      continue;
    }
    for (const child of children) {
      try {
        if (readFileSync(`/proc/${child}/cmdline`, 'utf8').includes(needle)) return child;
      } catch {
        continue;
      }
      const deeper = findDescendant(child, needle);
      if (deeper !== undefined) return deeper;
    }
  }
  return undefined;
}

async function startOnce(dataDir: string, start: FootprintStart['start']): Promise<FootprintStart> {
  const t0 = wallNow();
  const child = spawnTracked('sh', ['-c', START_SCRIPT], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: '0', HERALD_DATA_DIR: dataDir },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let api: number | undefined;
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`not listening after ${START_TIMEOUT_MS} ms`)), START_TIMEOUT_MS);
      let buffered = '';
      child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
        buffered += chunk;
        if (buffered.includes('"herald api listening"')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.stderr?.resume();
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`exited with ${code} before listening`));
      });
    });
    const readyMs = Math.round(wallNow() - t0);
    api = findDescendant(child.pid!, API_PROCESS);
    if (api === undefined) throw new Error(`no ${API_PROCESS} process under the start script`);
    await sleep(IDLE_MS);
    return { start, readyMs, idleRssMiB: round(procSample(api).rssBytes / 2 ** 20, 0) };
  } finally {
    // The shell does not forward signals to the API it started: stop the API, then the shell.
    if (api !== undefined) {
      try {
        process.kill(api, 'SIGTERM');
      } catch {
        // already gone
      }
    }
    await stopChild(child);
  }
}

async function buildOnce(): Promise<NonNullable<FootprintResult['build']>> {
  const t0 = wallNow();
  const child = spawnTracked('sh', ['-c', BUILD_STEP], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`build step exited with ${code}`);
  return { ms: Math.round(wallNow() - t0), output: output.trim() };
}

export async function runFootprint(): Promise<FootprintResult> {
  const dir = mkdtempSync(join(tmpdir(), 'herald-footprint-'));
  const command = `sh -c '${START_SCRIPT}' (the start script: what \`pnpm start\` runs), HERALD_DATA_DIR=<fresh dir>`;
  const starts: FootprintStart[] = [];
  let build: FootprintResult['build'];
  try {
    build = await buildOnce();
    starts.push(await startOnce(dir, 'first (creates the database)'));
    starts.push(await startOnce(dir, 'second (reopens it)'));
    return { command, build, starts };
  } catch (error) {
    return { command, build, starts, error: (error as Error).message };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function footprintMarkdown(result: FootprintResult | null | undefined): string {
  if (!result) return '';
  return [
    '## Embedded footprint: `pnpm start` (goal ≤ 3 s to ready, ≤ 250 MB RSS idle)',
    '',
    '| start | ready ms | RSS idle MiB |',
    '|---|---:|---:|',
    ...result.starts.map((start) => `| ${start.start} | ${start.readyMs} | ${start.idleRssMiB} |`),
    '',
    `- Command: ${result.command}; RSS of that node process ${IDLE_MS / 1000} s after the "listening" line.`,
    ...(result.build
      ? [
          `- Before the starts, the build step alone (\`${BUILD_STEP}\`; paid once after the sources or migrations change): ${result.build.ms} ms${result.build.output ? ` (${result.build.output.split('\n').join('; ')})` : ' (nothing was stale)'}.`,
        ]
      : []),
    ...(result.error ? [`- **Failed:** ${result.error}`] : []),
    '',
  ].join('\n');
}
