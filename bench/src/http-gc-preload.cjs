/**
 * Diagnostic preload for `bench/src/http-ab.ts` (`node --require`): collects garbage-collection figures
 * between two SIGUSR2 signals (v8.GCProfiler: every GC with the heap spaces before and after it) and the
 * event-loop delay, and on the second signal writes a summary as JSON to HTTP_GC_STATS_FILE.
 * With HTTP_PHASES=1 also each request's time inside the process (the HTTP server's `request` event to
 * the response's `finish`) and each wait for a pooled PostgreSQL connection (node-postgres'
 * `Pool.prototype.connect`, as resolved from the working directory's packages/db), as p50/p99/max.
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

const phases = process.env.HTTP_PHASES === '1';
let recording = false;
let serverMs = [];
let poolMs = [];
if (phases) {
  const http = require('node:http');
  const { performance } = require('node:perf_hooks');
  const emit = http.Server.prototype.emit;
  http.Server.prototype.emit = function (event, ...args) {
    if (event === 'request' && recording) {
      const res = args[1];
      const t0 = performance.now();
      res.once('finish', () => {
        if (recording) serverMs.push(performance.now() - t0);
      });
    }
    return emit.call(this, event, ...args);
  };
  try {
    const { join } = require('node:path');
    const pg = require(require.resolve('pg', { paths: [join(process.cwd(), 'packages/db'), process.cwd()] }));
    const connect = pg.Pool.prototype.connect;
    pg.Pool.prototype.connect = function (callback, ...rest) {
      if (!recording) return connect.call(this, callback, ...rest);
      const t0 = performance.now();
      if (typeof callback === 'function') {
        return connect.call(this, (error, client, done) => {
          poolMs.push(performance.now() - t0);
          callback(error, client, done);
        });
      }
      return connect.call(this).then((client) => {
        poolMs.push(performance.now() - t0);
        return client;
      });
    };
  } catch (error) {
    process.stderr.write(`http-gc-preload: pg not patched: ${error.message}\n`);
  }
}

function percentiles(values) {
  const sorted = Float64Array.from(values).sort();
  const at = (q) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : 0);
  return { n: sorted.length, p50: at(0.5), p99: at(0.99), max: sorted.length ? sorted[sorted.length - 1] : 0 };
}

if (file) {
  process.on('SIGUSR2', () => {
    if (profiler === undefined) {
      recording = phases;
      serverMs = [];
      poolMs = [];
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
    if (phases) {
      recording = false;
      summary.phases = { serverMs: percentiles(serverMs), poolWaitMs: percentiles(poolMs) };
    }
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
