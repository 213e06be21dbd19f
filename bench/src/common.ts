import { type ChildProcess, type SpawnOptions, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { waitFor } from '@herald/testing/ports';

/** The repository root (bench/src/../..). */
export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/**
 * `--import` value that lets a plain `node` run our TypeScript, so the pid we spawn is the process we
 * measure (the `tsx` binary would put a wrapper process in between). Resolved from the repository root,
 * which is the working directory of every process the bench starts.
 */
export const TSX_IMPORT = 'tsx';

/**
 * Wall-clock milliseconds with sub-millisecond resolution, comparable across processes on this machine:
 * every process adds its monotonic elapsed time to the wall clock it read at start-up.
 */
export function wallNow(): number {
  return performance.timeOrigin + performance.now();
}

/**
 * Tenant quotas off: the capacity scenarios load one organisation (and one user) to the pod's limits, which
 * the default quotas (docs/tenancy.md) would refuse. Spread first into a target's environment, so a
 * scenario that measures quotas sets its own.
 */
export const UNLIMITED_TENANT_QUOTAS: Readonly<Record<string, string>> = {
  TENANT_OPERATIONS_PER_SECOND: '0',
  TENANT_PUBLISHES_PER_SECOND: '0',
  TENANT_SOCKETS_PER_USER: '0',
  TENANT_SUBSCRIPTIONS: '0',
};

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it returns true, for at most `timeoutMs` (30 s by default here). */
export const waitUntil = (
  what: string,
  check: () => boolean | Promise<boolean>,
  { timeoutMs = 30_000, intervalMs = 50 } = {},
) => waitFor(what, check, { timeoutMs, intervalMs });

// ---------------------------------------------------------------------------------------------------------
// /proc sampling: the measured servers are plain `node` processes we spawned, so their pid is the process.

const CLOCK_TICKS_PER_SEC = 100; // getconf CLK_TCK on Linux
const PAGE_SIZE = 4096;

export interface ProcSample {
  /** CPU time of every thread of the process, µs (from /proc/<pid>/task/<tid>/schedstat: ns resolution). */
  cpuUs: number;
  /** Resident set size, bytes. */
  rssBytes: number;
}

/** CPU time of a process: the sum of its threads' schedstat run time, else utime + stime (10 ms ticks). */
function cpuUsOf(pid: number): number {
  try {
    let ns = 0;
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        // the thread exited between the listing and the read
      }
    }
    if (ns > 0) return ns / 1000;
  } catch {
    // no schedstat: fall back to the tick counters
  }
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) may contain spaces; fields after the closing paren are space-separated.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / CLOCK_TICKS_PER_SEC;
}

export function procSample(pid: number): ProcSample {
  const statm = readFileSync(`/proc/${pid}/statm`, 'utf8').split(' ');
  return { cpuUs: cpuUsOf(pid), rssBytes: Number(statm[1]) * PAGE_SIZE };
}

/**
 * Between two {@link machineSample}s: the whole machine's busy core-µs per unit of work (every process:
 * the bench's own and any other load's) and the busy share of all cores.
 */
export function machineCpuSince(
  from: ReturnType<typeof machineSample>,
  units: number,
  now = machineSample(),
): { usPerUnit: number; busyShare: number } {
  const busy = now.busyUs - from.busyUs;
  const total = now.totalUs - from.totalUs;
  return {
    usPerUnit: Math.round((busy / Math.max(1, units)) * 10) / 10,
    busyShare: total > 0 ? Math.round((busy / total) * 1000) / 1000 : 0,
  };
}

/** Sum of the samples of several processes (a two-pod deployment counts both pods). */
export function procSampleAll(pids: readonly number[]): ProcSample {
  let cpuUs = 0;
  let rssBytes = 0;
  for (const pid of pids) {
    const sample = procSample(pid);
    cpuUs += sample.cpuUs;
    rssBytes += sample.rssBytes;
  }
  return { cpuUs, rssBytes };
}

// ---------------------------------------------------------------------------------------------------------
// Child processes: every process the bench starts is registered here and killed on exit or Ctrl-C.

const children = new Set<ChildProcess>();
const cleanups = new Set<() => Promise<unknown>>();
let exiting = false;

export function spawnTracked(command: string, args: string[], options: SpawnOptions): ChildProcess {
  const child = spawn(command, args, options);
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

export function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

/** An async cleanup (dropping a database schema) run on normal end and on Ctrl-C. */
export function onCleanup(cleanup: () => Promise<unknown>): () => void {
  cleanups.add(cleanup);
  return () => cleanups.delete(cleanup);
}

/** Stops one child: `signal`, then SIGKILL after `graceMs`. Resolves when it has exited. */
export async function stopChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM', graceMs = 15_000) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/** Kills every child still running and runs pending cleanups. */
export async function cleanupAll(): Promise<void> {
  await Promise.allSettled([...children].map((child) => stopChild(child, 'SIGTERM', 5_000)));
  await Promise.allSettled([...cleanups].map((cleanup) => cleanup()));
  cleanups.clear();
}

/** Installs the Ctrl-C / SIGTERM / exit handlers of the coordinator process. */
export function installExitHandlers(): void {
  const onSignal = (signal: NodeJS.Signals) => {
    if (exiting) return;
    exiting = true;
    process.stderr.write(`\nbench: ${signal}, stopping every child process…\n`);
    const hard = setTimeout(() => process.exit(130), 20_000);
    hard.unref();
    void cleanupAll().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  process.once('exit', () => {
    for (const child of children) child.kill('SIGKILL');
  });
}

// ---------------------------------------------------------------------------------------------------------
// Statistics

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

export interface Spread {
  median: number;
  min: number;
  max: number;
  values: number[];
}

export function spread(values: readonly number[]): Spread {
  return {
    median: median(values),
    min: values.length ? Math.min(...values) : Number.NaN,
    max: values.length ? Math.max(...values) : Number.NaN,
    values: [...values],
  };
}

/** Buckets per power of two: values are kept to within about 1 %. */
const SUB_BUCKETS = 64;
const BUCKETS = SUB_BUCKETS * 40;

/** A mergeable log-bucket histogram of latencies in microseconds (exact count, min and max). */
export class Histogram {
  counts = new Float64Array(BUCKETS);
  count = 0;
  min = Number.POSITIVE_INFINITY;
  max = 0;

  record(valueUs: number): void {
    const value = Math.max(1, valueUs);
    const index = Math.min(BUCKETS - 1, Math.floor(Math.log2(value) * SUB_BUCKETS));
    this.counts[index]!++;
    this.count++;
    if (value < this.min) this.min = value;
    if (value > this.max) this.max = value;
  }

  merge(other: HistogramData): void {
    for (let i = 0; i < BUCKETS; i++) this.counts[i]! += other.counts[i]!;
    this.count += other.count;
    if (other.count > 0) {
      this.min = Math.min(this.min, other.min);
      this.max = Math.max(this.max, other.max);
    }
  }

  /** The value at percentile `p` (0–100), in µs. */
  percentile(p: number): number {
    if (this.count === 0) return Number.NaN;
    const rank = Math.max(1, Math.ceil((p / 100) * this.count));
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.counts[i]!;
      if (seen >= rank) return Math.min(this.max, Math.max(this.min, 2 ** ((i + 0.5) / SUB_BUCKETS)));
    }
    return this.max;
  }

  data(): HistogramData {
    return { counts: this.counts, count: this.count, min: this.min, max: this.max };
  }

  static from(data: HistogramData): Histogram {
    const histogram = new Histogram();
    histogram.merge(data);
    return histogram;
  }

  /** p50/p99/max in milliseconds. */
  summaryMs(): LatencySummary {
    return {
      count: this.count,
      minMs: round(this.min / 1000, 2),
      p50Ms: round(this.percentile(50) / 1000, 2),
      p99Ms: round(this.percentile(99) / 1000, 2),
      maxMs: round(this.max / 1000, 2),
    };
  }
}

export interface HistogramData {
  counts: Float64Array;
  count: number;
  min: number;
  max: number;
}

export interface LatencySummary {
  count: number;
  /** The fastest (for one event to all sockets: publish → first frame received). */
  minMs?: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

export function round(value: number, digits = 1): number {
  if (!Number.isFinite(value)) return value;
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}

/** Whole-machine CPU time from /proc/stat, µs: busy (not idle or iowait) and total, over all cores. */
export function machineSample(): { busyUs: number; totalUs: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
  const [user, nice, system, idle, iowait, irq, softirq, steal] = line
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number) as number[];
  const busy = user! + nice! + system! + irq! + softirq! + (steal ?? 0);
  const total = busy + idle! + iowait!;
  return { busyUs: (busy * 1_000_000) / CLOCK_TICKS_PER_SEC, totalUs: (total * 1_000_000) / CLOCK_TICKS_PER_SEC };
}
