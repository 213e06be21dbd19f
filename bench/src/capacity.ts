/**
 * The capacity table of `pnpm bench --sockets 19000`: one pod holding as many subscribed sockets
 * as the machine's open-files limit allows (20,000 per process here; the load is split across the client
 * processes, `--workers 2` by default), every socket receiving every event: RSS, latency and CPU at that size.
 */
import { round } from './common.js';
import type { FanoutResult } from './fanout.js';

/** Socket counts from this size up get the capacity table. */
export const CAPACITY_MIN_SOCKETS = 15_000;

const num = (value: number, digits = 0) =>
  Number.isFinite(value)
    ? value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
    : '–';

/** Cores the server kept busy during the saturation trials (server CPU time ÷ trial wall time). */
export function serverCoresBusy(result: FanoutResult): number {
  const cpuUs = result.saturation.trials.reduce((sum, trial) => sum + trial.serverCpuUs, 0);
  const wallUs = result.saturation.trials.reduce((sum, trial) => sum + trial.durationMs * 1000, 0);
  return wallUs > 0 ? round(cpuUs / wallUs, 2) : Number.NaN;
}

/** Markdown lines for every result at ≥ {@link CAPACITY_MIN_SOCKETS} sockets (none: no lines). */
export function capacityMarkdown(fanout: FanoutResult[]): string[] {
  const rows = fanout.filter((r) => r.sockets >= CAPACITY_MIN_SOCKETS);
  if (rows.length === 0) return [];
  return [
    '## Capacity: one pod at the open-files limit, every socket receiving every event',
    '',
    '| server | sockets subscribed / asked | RSS loaded MiB | RSS/socket KB | one event → all: p50 / p99 / max ms | fixed rate p99 ms | deliveries/s at saturation | server CPU µs/delivery | server cores busy at saturation | wrong / missing / dup | closed by server |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map((r) => {
      const c = r.correctness;
      return `| ${r.label} | ${num(r.subscribed)} / ${num(r.sockets)} | ${num(r.rss.loadedMiB)} | ${num(r.rss.perSocketKB, 1)} | ${num(r.single.p50Ms.median, 1)} / ${num(r.single.p99Ms.median, 1)} / ${num(r.single.maxMs.median, 1)} | ${num(r.fixed.latency.p99Ms, 1)} | ${num(r.saturation.deliveriesPerSec.median)} | ${num(r.saturation.serverCpuUsPerDelivery.median, 1)} | ${num(serverCoresBusy(r), 2)} | ${c.wrong} / ${c.missing} / ${c.duplicate} | ${c.socketsClosed} |`;
    }),
    '',
    'Run with `pnpm bench --sockets 19000` (bench/run.sh raises `ulimit -n` to the hard limit, 20,000 here; the sockets are split across the load-client processes so that none needs more than its limit).',
    '',
  ];
}
