import type { FaultRecord } from './faults.js';
import type { LedgerResult } from './ledger.js';
import {
  type ProcessFigures,
  type RedisKeyKind,
  RSS_MIN_WINDOWS,
  RSS_SETTLING_MS,
  RSS_WINDOW_MS,
} from './resources.js';

interface MinuteLatency {
  minute: number;
  count: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

export interface SoakResults {
  command: string;
  commit: string;
  /** What the pods and dispatchers ran (`--processes`): the production builds, as the images do, or the sources under tsx. */
  builds?: 'image' | 'source';
  startedAt: string;
  minutes: number;
  rate: number;
  faultsRequested: string[];
  drainedMs: number;
  publishes: {
    attempted: number;
    acknowledged: number;
    failed: number;
    bursts: number;
    skippedTicks: number;
    committed: number;
    failureSamples: string[];
  };
  probes: { sent: number; ok: number };
  queries: { ok: number; failed: number };
  subscribers: { count: number; reconnects: number; cursorExpired: number; errors: string[] };
  ledger: LedgerResult;
  violationCount: number;
  faults: FaultRecord[];
  unexpectedExits: string[];
  processes: ProcessFigures[];
  redisMemory: { t: number; usedMb: number }[];
  /** Redis memory by kind of key at the end (after the drain). */
  redisKeys?: RedisKeyKind[];
  tables: { table: string; rows: number; totalMb: number; indexMb: number }[];
  frameLatency: MinuteLatency[];
  receiverLatency: MinuteLatency[];
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** The run as markdown: the summary table first, then each section. */
export function renderMarkdown(results: SoakResults): string {
  const { ledger } = results;
  const subscriberTotals = ledger.subscribers.reduce(
    (sum, tally) => ({
      expected: sum.expected + tally.expected,
      received: sum.received + tally.received,
      reconciled: sum.reconciled + tally.reconciled,
      missing: sum.missing + tally.missing,
      duplicates: sum.duplicates + tally.duplicates,
    }),
    { expected: 0, received: 0, reconciled: 0, missing: 0, duplicates: 0 },
  );
  const lines = [
    `# Soak: ${results.minutes} min, faults ${results.faultsRequested.join(', ') || 'none'}`,
    '',
    `\`${results.command}\` at ${results.commit}, started ${results.startedAt}; drain took ${seconds(results.drainedMs)}.`,
    ...(results.builds
      ? [
          '',
          results.builds === 'image'
            ? 'Pods and dispatchers: the production builds (`pnpm build:prod`), started as the container images start them.'
            : 'Pods and dispatchers: the TypeScript sources under tsx (`--processes source`).',
        ]
      : []),
    '',
    '## Summary',
    '',
    '| what | figure |',
    '|---|---|',
    `| ledger | **${ledger.balanced ? 'balanced' : `NOT balanced (${results.violationCount} items)`}** |`,
    `| publishes attempted / acknowledged / committed (load and probes) | ${results.publishes.attempted} / ${results.publishes.acknowledged} / ${results.publishes.committed} |`,
    `| publishes failed (no answer or an error; not counted as committed unless PostgreSQL has them) | ${results.publishes.failed} |`,
    `| subscriber events expected / received / reconciled after CURSOR_EXPIRED / missing / duplicate | ${subscriberTotals.expected} / ${subscriberTotals.received} / ${subscriberTotals.reconciled} / ${subscriberTotals.missing} / ${subscriberTotals.duplicates} |`,
    `| subscribers, reconnects, CURSOR_EXPIRED | ${results.subscribers.count}, ${results.subscribers.reconnects}, ${results.subscribers.cursorExpired} |`,
    `| posts queries ok / failed | ${results.queries.ok} / ${results.queries.failed} |`,
    `| processes that exited unscheduled | ${results.unexpectedExits.length} |`,
    `| largest RSS slope once settled (Herald, nginx, Redis, PostgreSQL; not the soak itself) | ${largestSlope(results.processes)} |`,
    `| slowest recovery after a fault | ${slowestRecovery(results.faults)} |`,
    '',
    '## Webhook endpoints',
    '',
    '| endpoint | selected | succeeded | DEAD | scheduled | skipped (disabled) | unaccounted | received distinct | duplicate copies | invalid | first seen out of order (FIFO) | balanced |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...ledger.endpoints.map(
      (tally) =>
        `| ${tally.name} | ${tally.selected} | ${tally.succeeded} | ${tally.dead} | ${tally.scheduled} | ${tally.skipped} | ${tally.unaccounted} | ${tally.receivedDistinct} | ${tally.receivedDuplicates} | ${tally.invalid} | ${tally.outOfOrder ?? '–'} | ${tally.balanced ? 'yes' : '**no**'} |`,
    ),
    '',
    '## Faults',
    '',
    '| fault | start | end | healthy again after its end | what |',
    '|---|---|---|---|---|',
    ...results.faults.map(
      (fault) =>
        `| ${fault.name} | ${seconds(fault.startAt)} | ${seconds(fault.endAt)} | ${fault.recoveryMs == null ? '**never**' : seconds(fault.recoveryMs)} | ${fault.detail} |`,
    ),
    '',
    'Healthy again: the first probe published after the fault ended (one a second, its own organisation) whose',
    'publish and `posts` query answered and whose frame and webhook both arrived; the time is its later arrival.',
    '',
    '## Latency per minute (publishPost sent → arrival)',
    '',
    '| minute | frames | frame p50 | frame p99 | frame max | webhooks (fast receivers) | webhook p50 | webhook p99 |',
    '|---|---|---|---|---|---|---|---|',
    ...results.frameLatency.map((frame) => {
      const hook = results.receiverLatency.find((entry) => entry.minute === frame.minute);
      return `| ${frame.minute} | ${frame.count} | ${frame.p50Ms} ms | ${frame.p99Ms} ms | ${frame.maxMs} ms | ${hook?.count ?? 0} | ${hook ? `${hook.p50Ms} ms` : '–'} | ${hook ? `${hook.p99Ms} ms` : '–'} |`;
    }),
    '',
    '## Processes (sampled every 10 s)',
    '',
    '| process | pid | samples | RSS first → last (max), MB | RSS peak per 5 min once settled, MB | RSS slope once settled, MB/hour | live V8 heap floor per 5 min once settled, MB | live heap slope, MB/hour | external floor per 5 min once settled, MB | external floor slope, MB/hour | CPU, % of a core |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...results.processes.map(
      (figures) =>
        `| ${figures.role} | ${figures.pid || '–'} | ${figures.samples} | ${figures.firstRssMb} → ${figures.lastRssMb} (${figures.maxRssMb}) | ${figures.settledRssPeaksMb?.join(', ') || '–'} | ${figures.rssSlopeMbPerHour ?? '–'} | ${figures.settledHeapFloorsMb?.join(', ') || '–'} | ${figures.heapSlopeMbPerHour ?? '–'} | ${figures.settledExternalFloorsMb?.join(', ') || '–'} | ${figures.externalSlopeMbPerHour ?? '–'} | ${figures.cpuPercent || '–'} |`,
    ),
    '',
    `Settled: after the later of the run's warm-up and the process's own first ${RSS_SETTLING_MS / 60_000} minutes (RSS grows while the C allocator's arenas fill, then holds). The slope is the least-squares line through the peak of each whole ${RSS_WINDOW_MS / 60_000}-minute window after that, given from ${RSS_MIN_WINDOWS} windows on; a process restarted late has none. The live V8 heap (API pods and dispatchers: the heap in use just after each one's last full garbage collection, read from their \`/metrics\`) is judged the same way by its floor per window: RSS rising over a flat live heap is V8's or the C allocator's sizing, or native memory, not objects kept alive. External memory (Buffers and ArrayBuffers, held by JavaScript objects but outside the heap) is judged by its floor too: its rise, with a flat heap, points at buffers kept alive; RSS rising over both flat is the allocator or memory no JavaScript object accounts for.`,
    '',
    `Redis used_memory: ${results.redisMemory.length > 0 ? `${results.redisMemory[0]!.usedMb.toFixed(1)} MB at start, ${Math.max(...results.redisMemory.map((entry) => entry.usedMb)).toFixed(1)} MB at most, ${results.redisMemory[results.redisMemory.length - 1]!.usedMb.toFixed(1)} MB at the end` : 'not sampled'}.`,
    '',
    ...(results.redisKeys && results.redisKeys.length > 0
      ? [
          'Redis keys at the end, by kind (`MEMORY USAGE`; hash tags and numbers folded):',
          '',
          '| keys | how many | MB |',
          '|---|---|---|',
          ...results.redisKeys.slice(0, 15).map((kind) => `| \`${kind.kind}\` | ${kind.keys} | ${kind.mb} |`),
          '',
        ]
      : []),
    '## PostgreSQL tables at the end',
    '',
    '| table | live rows | total MB | of which indexes MB |',
    '|---|---|---|---|',
    ...results.tables.map((table) => `| ${table.table} | ${table.rows} | ${table.totalMb} | ${table.indexMb} |`),
    '',
  ];
  if (results.unexpectedExits.length > 0)
    lines.push('## Unscheduled exits', '', ...results.unexpectedExits.map((line) => `- ${line}`), '');
  if (!ledger.balanced) {
    lines.push('## Ledger items (first 50)', '');
    for (const violation of ledger.violations.slice(0, 50))
      lines.push(
        `- ${violation.kind} at ${violation.where}${violation.id ? ` ${violation.id}` : ''}: ${violation.detail}`,
      );
    lines.push('');
  }
  return lines.join('\n');
}

function largestSlope(processes: readonly ProcessFigures[]): string {
  // Herald's processes and the servers it runs on; the soak itself (it keeps every frame it saw) is listed apart.
  const sloped = processes.filter(
    (figures) => figures.rssSlopeMbPerHour !== null && figures.pid > 0 && figures.role !== 'soak',
  );
  if (sloped.length === 0)
    return `– (no process lived ${(RSS_SETTLING_MS + RSS_MIN_WINDOWS * RSS_WINDOW_MS) / 60_000} minutes)`;
  const worst = sloped.reduce((a, b) => (b.rssSlopeMbPerHour! > a.rssSlopeMbPerHour! ? b : a));
  return `${worst.rssSlopeMbPerHour} MB/hour (${worst.role}, pid ${worst.pid})`;
}

function slowestRecovery(faults: readonly FaultRecord[]): string {
  if (faults.length === 0) return '– (no faults)';
  const never = faults.filter((fault) => fault.recoveryMs == null);
  if (never.length > 0) return `**never** after ${never.map((fault) => fault.name).join(', ')}`;
  const worst = faults.reduce((a, b) => (b.recoveryMs! > a.recoveryMs! ? b : a));
  return `${seconds(worst.recoveryMs!)} (${worst.name})`;
}
