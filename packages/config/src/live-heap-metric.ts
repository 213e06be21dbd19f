import { constants, PerformanceObserver } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import { Gauge, type Registry } from 'prom-client';

/**
 * `<prefix>heap_live_after_gc_bytes`: the V8 heap in use just after the process's last full (mark-compact)
 * collection, what survives garbage collection. The heap in use (`…nodejs_heap_size_used_bytes`) swings
 * with garbage and RSS with V8's and the C allocator's sizing; a leak of JavaScript objects shows as this
 * one rising. 0 until the first full collection. Read once per full collection, from V8's own figures.
 */
export function registerLiveHeapMetric(registry: Registry, prefix: string): Gauge {
  observeFullCollections();
  return new Gauge({
    name: `${prefix}heap_live_after_gc_bytes`,
    help: 'V8 heap in use just after the last full garbage collection (what survives it); 0 before the first',
    registers: [registry],
    collect() {
      this.set(liveAfterFullCollection);
    },
  });
}

let liveAfterFullCollection = 0;
let observer: PerformanceObserver | undefined;

/** One observer per process, however many registries read it (tests start several servers in one). */
function observeFullCollections() {
  if (observer) return;
  observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = ((entry as { detail?: unknown }).detail as { kind?: number } | null | undefined)?.kind;
      // Called soon after the collection (entries are delivered on a later turn): what was allocated since
      // is counted too, a few KB against a heap of tens of MB.
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) liveAfterFullCollection = getHeapStatistics().used_heap_size;
    }
  });
  observer.observe({ entryTypes: ['gc'] });
}
