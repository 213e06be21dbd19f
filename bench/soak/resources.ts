import { execFileSync } from 'node:child_process';
import { Socket } from 'node:net';
import { procSample } from '../src/common.js';
import type { Topology } from './topology.js';

export interface ProcessSample {
  /** ms since the run started. */
  t: number;
  role: string;
  pid: number;
  rssMb: number;
  cpuUs: number;
  /**
   * V8 heap in use just after the process's last full collection (what survived it), MB, from its own
   * `/metrics` (`*_heap_live_after_gc_bytes`; API pods and dispatchers only, none before their first).
   */
  heapMb?: number;
  /**
   * Memory of JavaScript objects held outside the V8 heap (Buffers, ArrayBuffers: socket and frame
   * buffers), MB, from the same `/metrics` (`nodejs_external_memory_bytes`).
   */
  externalMb?: number;
}

export interface ProcessFigures {
  role: string;
  pid: number;
  samples: number;
  firstRssMb: number;
  lastRssMb: number;
  maxRssMb: number;
  /**
   * Slope of RSS once the process has settled, MB per hour ({@link settledRssSlope}); null when the process
   * lived too short a time after its settling to judge one.
   */
  rssSlopeMbPerHour: number | null;
  /** RSS peak of each whole window after the settling, MB: what the slope is drawn through. */
  settledRssPeaksMb: number[];
  /**
   * Slope of the live V8 heap's floor once settled, MB per hour ({@link settledHeap}); null where it was not
   * sampled or the process lived too short a time. A rising RSS over a flat live heap is V8's or the C
   * allocator's sizing (or native memory), not JavaScript objects kept alive.
   */
  heapSlopeMbPerHour: number | null;
  /** Live V8 heap floor (lowest sample) of each whole window after the settling, MB. */
  settledHeapFloorsMb: number[];
  /** Slope of the external memory's floor once settled, MB per hour, as the heap's; null where not sampled. */
  externalSlopeMbPerHour: number | null;
  /** External memory floor of each whole window after the settling, MB. */
  settledExternalFloorsMb: number[];
  /** Average share of one core over the process's sampled life, %. */
  cpuPercent: number;
}

/** Samples RSS and CPU of every process of the topology every `everyMs`, and Redis's memory. */
export class ResourceSampler {
  samples: ProcessSample[] = [];
  redisMemory: { t: number; usedMb: number }[] = [];
  private timer: ReturnType<typeof setInterval> | undefined;

  constructor(
    private readonly topology: Topology,
    private readonly startedAt: number,
    private readonly everyMs = 10_000,
  ) {}

  start(): void {
    void this.sample();
    this.timer = setInterval(() => void this.sample(), this.everyMs);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  async sample(): Promise<void> {
    const t = Date.now() - this.startedAt;
    const heapReads: Promise<void>[] = [];
    for (const { role, pid, metricsUrl } of await this.topology.processes().catch(() => [])) {
      try {
        const sample = procSample(pid);
        const entry: ProcessSample = { t, role, pid, rssMb: sample.rssBytes / 1_048_576, cpuUs: sample.cpuUs };
        this.samples.push(entry);
        if (metricsUrl) {
          heapReads.push(
            memoryFromMetrics(metricsUrl).then(
              ({ heapBytes, externalBytes }) => {
                if (heapBytes !== undefined) entry.heapMb = heapBytes / 1_048_576;
                if (externalBytes !== undefined) entry.externalMb = externalBytes / 1_048_576;
              },
              () => undefined, // a pod that is down or stalled has no heap figure this time
            ),
          );
        }
      } catch {
        // exited between the listing and the read
      }
    }
    await Promise.all(heapReads);
    const used = await redisUsedMemory(this.topology.redisPort).catch(() => undefined);
    if (used !== undefined) this.redisMemory.push({ t, usedMb: used / 1_048_576 });
  }

  /**
   * Figures per process (one per pid: a restarted pod is a new process). PostgreSQL's backends come and
   * go with the pools; they are summed into one `postgres-backends` row per sample instead.
   */
  figures(warmUpMs: number): ProcessFigures[] {
    const series = new Map<string, ProcessSample[]>();
    const backends = new Map<number, ProcessSample>();
    for (const sample of this.samples) {
      if (sample.role === 'postgres-child' || sample.role === 'nginx-worker') {
        const role = sample.role === 'postgres-child' ? 'postgres-backends' : 'nginx-workers';
        const key = sample.t * 2 + (role === 'nginx-workers' ? 1 : 0);
        const sum: ProcessSample = backends.get(key) ?? { t: sample.t, role, pid: 0, rssMb: 0, cpuUs: 0 };
        sum.rssMb += sample.rssMb;
        backends.set(key, sum);
        continue;
      }
      const key = `${sample.role} ${sample.pid}`;
      const list = series.get(key) ?? [];
      list.push(sample);
      series.set(key, list);
    }
    for (const sum of backends.values()) {
      const list = series.get(sum.role) ?? [];
      list.push(sum);
      series.set(sum.role, list);
    }
    return [...series.values()].map((list) => {
      const first = list[0]!;
      const last = list[list.length - 1]!;
      const spanUs = (last.t - first.t) * 1000;
      return {
        role: first.role,
        pid: first.pid,
        samples: list.length,
        firstRssMb: round(first.rssMb),
        lastRssMb: round(last.rssMb),
        maxRssMb: round(Math.max(...list.map((sample) => sample.rssMb))),
        ...settledRss(list, warmUpMs),
        ...settledHeap(list, warmUpMs),
        ...settledExternal(list, warmUpMs),
        cpuPercent: first.pid > 0 && spanUs > 0 ? round(((last.cpuUs - first.cpuUs) / spanUs) * 100) : 0,
      };
    });
  }
}

/**
 * How long a process's RSS takes to settle. Measured on the API pods (40 minutes without faults, heap and
 * RSS sampled every 10 s): the C allocator's arenas fill for 10–15 minutes of load while the V8 heap stays
 * flat, then RSS holds. A slope over that ramp says nothing about a leak.
 */
export const RSS_SETTLING_MS = 15 * 60_000;
/** RSS is judged by its peak per window of this length: a window's peak ignores one GC's or one trim's dip. */
export const RSS_WINDOW_MS = 5 * 60_000;
/** Whole windows needed after the settling before a slope is given (below it, two peaks are noise). */
export const RSS_MIN_WINDOWS = 3;

/**
 * A process's RSS once settled: the peak of each whole {@link RSS_WINDOW_MS} window after the later of the
 * run's warm-up and the process's own first {@link RSS_SETTLING_MS} (a restarted process starts cold), and
 * the least-squares slope through those peaks, MB per hour. A leak lifts every window's peak; glibc giving
 * memory back and taking it again (seen as 30 MB dips) moves single samples and a least-squares line
 * through them, not the peaks. The slope is null under {@link RSS_MIN_WINDOWS} whole windows.
 */
export function settledRss(
  samples: readonly ProcessSample[],
  warmUpMs: number,
): { rssSlopeMbPerHour: number | null; settledRssPeaksMb: number[] } {
  const { slope, values } = settledWindows(samples, warmUpMs, (sample) => sample.rssMb, Math.max);
  return { rssSlopeMbPerHour: slope, settledRssPeaksMb: values };
}

/**
 * A process's live V8 heap once settled: the floor (lowest sample) of each whole window, as
 * {@link settledRss} takes RSS's peak. The figure moves only at full collections (what survived the last
 * one); a leak lifts it. Windows with no sample (a process without `/metrics`, or before its first full
 * collection) are left out.
 */
export function settledHeap(
  samples: readonly ProcessSample[],
  warmUpMs: number,
): { heapSlopeMbPerHour: number | null; settledHeapFloorsMb: number[] } {
  const { slope, values } = settledWindows(samples, warmUpMs, (sample) => sample.heapMb, Math.min);
  return { heapSlopeMbPerHour: slope, settledHeapFloorsMb: values };
}

/** A process's external memory once settled, by its floor per window as {@link settledHeap}. */
export function settledExternal(
  samples: readonly ProcessSample[],
  warmUpMs: number,
): { externalSlopeMbPerHour: number | null; settledExternalFloorsMb: number[] } {
  const { slope, values } = settledWindows(samples, warmUpMs, (sample) => sample.externalMb, Math.min);
  return { externalSlopeMbPerHour: slope, settledExternalFloorsMb: values };
}

function settledWindows(
  samples: readonly ProcessSample[],
  warmUpMs: number,
  read: (sample: ProcessSample) => number | undefined,
  pick: (...values: number[]) => number,
): { slope: number | null; values: number[] } {
  const points: { t: number; value: number }[] = [];
  if (samples.length > 0) {
    const from = Math.max(warmUpMs, samples[0]!.t + RSS_SETTLING_MS);
    const windows = Math.floor((samples[samples.length - 1]!.t - from) / RSS_WINDOW_MS);
    for (let index = 0; index < windows; index++) {
      const start = from + index * RSS_WINDOW_MS;
      const inWindow = samples
        .filter((sample) => sample.t >= start && sample.t < start + RSS_WINDOW_MS)
        .map(read)
        .filter((value): value is number => value !== undefined);
      if (inWindow.length > 0) points.push({ t: start + RSS_WINDOW_MS / 2, value: pick(...inWindow) });
    }
  }
  return {
    slope: points.length < RSS_MIN_WINDOWS ? null : round(slopePerMs(points) * 3_600_000),
    values: points.map((point) => round(point.value)),
  };
}

/** Least-squares slope of a value over time, per ms. */
function slopePerMs(points: readonly { t: number; value: number }[]): number {
  const n = points.length;
  const meanT = points.reduce((total, point) => total + point.t, 0) / n;
  const meanV = points.reduce((total, point) => total + point.value, 0) / n;
  let numerator = 0;
  let denominator = 0;
  for (const point of points) {
    numerator += (point.t - meanT) * (point.value - meanV);
    denominator += (point.t - meanT) ** 2;
  }
  return denominator === 0 ? 0 : numerator / denominator;
}

const round = (value: number) => Math.round(value * 10) / 10;

/**
 * `*_heap_live_after_gc_bytes` (the heap that survived the last full collection; 0, before the first, reads
 * as undefined) and `*_nodejs_external_memory_bytes` from a process's Prometheus `/metrics` (bounded by a
 * 2 s timeout); a figure missing from the text is undefined.
 */
export async function memoryFromMetrics(
  metricsUrl: string,
): Promise<{ heapBytes: number | undefined; externalBytes: number | undefined }> {
  const response = await fetch(metricsUrl, { signal: AbortSignal.timeout(2_000) });
  const text = await response.text();
  const read = (name: string) => {
    const match = new RegExp(`^\\w*${name} (\\S+)$`, 'm').exec(text);
    return match ? Number(match[1]) : undefined;
  };
  const live = read('heap_live_after_gc_bytes');
  return { heapBytes: live ? live : undefined, externalBytes: read('nodejs_external_memory_bytes') };
}

/** `INFO memory`'s used_memory, over a raw connection (bounded by a 2 s timeout). */
export function redisUsedMemory(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = new Socket();
    let text = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('redis INFO timed out'));
    }, 2_000);
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    socket.connect(port, '127.0.0.1', () => socket.write('INFO memory\r\n'));
    socket.on('data', (chunk) => {
      text += chunk.toString();
      const match = /used_memory:(\d+)/.exec(text);
      if (match) {
        clearTimeout(timer);
        socket.destroy();
        resolve(Number(match[1]));
      }
    });
  });
}

/** Size of every table of the soak database (with its indexes and TOAST), largest first. */
export async function tableSizes(
  topology: Topology,
): Promise<{ table: string; rows: number; totalMb: number; indexMb: number }[]> {
  const rows = await topology.query<{ table: string; rows: string; total: string; indexes: string }>(
    `select s.relname as table, s.n_live_tup as rows, pg_total_relation_size(s.relid) as total,
       pg_indexes_size(s.relid) as indexes
     from pg_stat_user_tables s where s.schemaname = current_schema()
     order by pg_total_relation_size(s.relid) desc`,
  );
  return rows.map((row) => ({
    table: row.table,
    rows: Number(row.rows),
    totalMb: round(Number(row.total) / 1_048_576),
    indexMb: round(Number(row.indexes) / 1_048_576),
  }));
}

/** Redis memory by kind of key: names with their `{hash tag}`, quota subject and numbers folded, summed. */
export interface RedisKeyKind {
  kind: string;
  keys: number;
  mb: number;
}

/** A key's kind: its `{hash tag}`, a quota key's subject (organisation or user) and its numbers folded. */
export function redisKeyKind(key: string): string {
  return key
    .replace(/\{[^}]*\}/g, '{…}')
    .replace(/(:tenant:[^:]+:).+$/, '$1…')
    .replace(/\d+/g, 'N');
}

/** Keys looked at, at most: the breakdown stays quick whatever Redis holds. */
const MAX_KEYS_MEASURED = 50_000;

/** `MEMORY USAGE` of every key (up to {@link MAX_KEYS_MEASURED}), grouped by {@link RedisKeyKind}. */
export function redisKeyKinds(port: number): RedisKeyKind[] {
  const cli = (args: string[], input?: string) =>
    execFileSync('redis-cli', ['-p', String(port), ...args], {
      input,
      encoding: 'utf8',
      timeout: 30_000,
      maxBuffer: 64 << 20,
    });
  const keys = cli(['--scan']).split('\n').filter(Boolean).slice(0, MAX_KEYS_MEASURED);
  if (keys.length === 0) return [];
  const quoted = keys.map((key) => `MEMORY USAGE "${key.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}" SAMPLES 0`);
  const sizes = cli([], `${quoted.join('\n')}\n`).split('\n');
  const kinds = new Map<string, RedisKeyKind>();
  keys.forEach((key, i) => {
    const kind = redisKeyKind(key);
    const entry = kinds.get(kind) ?? { kind, keys: 0, mb: 0 };
    entry.keys++;
    entry.mb += Number(sizes[i]) / 1_048_576 || 0;
    kinds.set(kind, entry);
  });
  return [...kinds.values()]
    .map((entry) => ({ ...entry, mb: Math.round(entry.mb * 100) / 100 }))
    .sort((a, b) => b.mb - a.mb);
}
