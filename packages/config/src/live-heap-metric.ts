import { constants, PerformanceObserver } from 'node:perf_hooks';
import { getHeapSpaceStatistics } from 'node:v8';
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

/**
 * The heap in use outside the young generation. Entries reach the observer a turn or two after the
 * collection; what was allocated meanwhile is young (up to a semi-space of MBs under load) and left out.
 */
function oldGenerationUsed(): number {
  let used = 0;
  for (const space of getHeapSpaceStatistics())
    if (space.space_name !== 'new_space' && space.space_name !== 'new_large_object_space')
      used += space.space_used_size;
  return used;
}

let observer: PerformanceObserver | undefined;

/** One observer per process, however many registries read it (tests start several servers in one). */
function observeFullCollections() {
  if (observer) return;
  observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = ((entry as { detail?: unknown }).detail as { kind?: number } | null | undefined)?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) liveAfterFullCollection = oldGenerationUsed();
    }
  });
  observer.observe({ entryTypes: ['gc'] });
}
