import { Counter, type Registry } from 'prom-client';
import type { LogOutput } from './log-output.js';

/**
 * `herald_log_lines_dropped_total`: log lines a process could not hand to its reader (gone, or too slow
 * and its buffer full; see log-output.ts). Anything above zero means lost logs, never a stalled process.
 */
export function registerLogDropMetric(registry: Registry, outputs: readonly LogOutput[]): Counter {
  let counted = 0;
  return new Counter({
    name: 'herald_log_lines_dropped_total',
    help: 'Log lines dropped because the log reader was gone or too slow (never blocks the process)',
    registers: [registry],
    collect() {
      const now = outputs.reduce((sum, output) => sum + output.dropped(), 0);
      if (now > counted) this.inc(now - counted);
      counted = now;
    },
  });
}
