/**
 * Diagnostic preload for `bench/src/http-ab.ts` (`node --require`): collects garbage-collection figures
 * between two SIGUSR2 signals (v8.GCProfiler: every GC with the heap spaces before and after it) and the
 * event-loop delay, and on the second signal writes a summary as JSON to HTTP_GC_STATS_FILE.
 */
'use strict';
const v8 = require('node:v8');
const { monitorEventLoopDelay } = require('node:perf_hooks');
const { writeFileSync } = require('node:fs');

const file = process.env.HTTP_GC_STATS_FILE;
/** With HTTP_HEAP_PROFILE=all|promoted: a sampling heap profile of the same window, written beside the stats
 * (`<file>.heapprofile`): every allocation (`all`), or only those no scavenge collected (`promoted`). */
const heapMode = process.env.HTTP_HEAP_PROFILE;
let session;
let profiler;
let delay;

const used = (stats, name) => stats.heapSpaceStatistics.find((space) => space.spaceName === name)?.spaceUsedSize ?? 0;

function summarise(statistics) {
  const kinds = {};
  let promoted = 0;
  let allocated = 0;
  let newAfter;
  for (const gc of statistics) {
    kinds[gc.gcType] ??= { count: 0, ms: 0, maxMs: 0 };
    const kind = kinds[gc.gcType];
    kind.count++;
    kind.ms += gc.cost / 1000;
    kind.maxMs = Math.max(kind.maxMs, gc.cost / 1000);
    const newBefore = used(gc.beforeGC, 'new_space');
    if (newAfter !== undefined) allocated += Math.max(0, newBefore - newAfter);
    newAfter = used(gc.afterGC, 'new_space');
    if (gc.gcType === 'Scavenge') promoted += used(gc.afterGC, 'old_space') - used(gc.beforeGC, 'old_space');
  }
  return { kinds, promotedBytes: promoted, newSpaceAllocatedBytes: allocated };
}

if (file) {
  process.on('SIGUSR2', () => {
    if (profiler === undefined) {
      profiler = new v8.GCProfiler();
      profiler.start();
      delay = monitorEventLoopDelay({ resolution: 1 });
      delay.enable();
      if (heapMode) {
        const { Session } = require('node:inspector');
        session ??= new Session();
        session.connect?.();
        session.post('HeapProfiler.enable', () =>
          session.post('HeapProfiler.startSampling', {
            samplingInterval: 4096,
            includeObjectsCollectedByMajorGC: true,
            includeObjectsCollectedByMinorGC: heapMode === 'all',
          }),
        );
      }
      return;
    }
    const result = profiler.stop();
    delay.disable();
    const summary = summarise(result.statistics);
    summary.loopDelayMs = {
      p50: delay.percentile(50) / 1e6,
      p99: delay.percentile(99) / 1e6,
      max: delay.max / 1e6,
    };
    profiler = undefined;
    if (heapMode) {
      session.post('HeapProfiler.stopSampling', (error, result) => {
        if (!error) writeFileSync(`${file}.heapprofile`, JSON.stringify(result.profile));
        session.disconnect();
        session = undefined;
        writeFileSync(file, JSON.stringify(summary));
      });
      return;
    }
    writeFileSync(file, JSON.stringify(summary));
  });
}
