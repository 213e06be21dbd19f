// Scratch diagnostic: event-loop stalls (> 8 ms) and GC pauses (> 4 ms) with wall-clock times, flushed every second.
const { performance, PerformanceObserver } = require('node:perf_hooks');
const fs = require('node:fs');
const out = `${process.env.STALL_OUT || '/tmp/stall'}-${process.pid}.jsonl`;
let buf = [];
globalThis.__diagPush = (x) => buf.push(x);
let last = performance.now();
let lastCpu = process.cpuUsage();
let secStart = performance.now();
let secCpu = process.cpuUsage();
setInterval(() => {
  const now = performance.now();
  const cpu = process.cpuUsage();
  const gap = now - last - 2;
  if (gap > 8) buf.push({ k: 'stall', at: Math.round(performance.timeOrigin + last), ms: Math.round(gap * 10) / 10, cpuMs: Math.round((cpu.user + cpu.system - lastCpu.user - lastCpu.system) / 100) / 10 });
  if (now - secStart >= 1000) {
    buf.push({ k: 'sec', at: Math.round(performance.timeOrigin + secStart), cpuPct: Math.round((cpu.user + cpu.system - secCpu.user - secCpu.system) / 10 / (now - secStart)) });
    secStart = now;
    secCpu = cpu;
  }
  last = now;
  lastCpu = cpu;
}, 2).unref();
new PerformanceObserver((list) => {
  for (const e of list.getEntries())
    if (e.duration > 4) buf.push({ k: 'gc', kind: e.detail?.kind, at: Math.round(performance.timeOrigin + e.startTime), ms: Math.round(e.duration * 10) / 10 });
}).observe({ entryTypes: ['gc'] });
const flush = () => { if (buf.length) { fs.appendFileSync(out, buf.map((x) => JSON.stringify(x)).join('\n') + '\n'); buf = []; } };
setInterval(flush, 1000).unref();
process.on('exit', flush);
if (process.env.DIAG_PROF_DIR) {
  const inspector = require('node:inspector');
  const session = new inspector.Session();
  session.connect();
  session.post('Profiler.enable');
  session.post('Profiler.setSamplingInterval', { interval: 500 });
  session.post('Profiler.start');
  process.on('exit', () => {
    session.post('Profiler.stop', (err, { profile }) => {
      if (!err) fs.writeFileSync(`${process.env.DIAG_PROF_DIR}/${process.pid}.cpuprofile`, JSON.stringify(profile));
    });
  });
}
if (process.env.DIAG_PG_FROM) {
  const { createRequire } = require('node:module');
  const req = createRequire(`${process.env.DIAG_PG_FROM}/package.json`);
  const pg = req('pg');
  const Pool = Object.getPrototypeOf(new pg.Pool({ max: 1 })).constructor;
  const connect = Pool.prototype.connect;
  Pool.prototype.connect = function (cb) {
    if (cb) return connect.call(this, cb);
    const t = performance.now();
    const waiting = this.waitingCount, idle = this.idleCount, total = this.totalCount;
    return connect.call(this).then((client) => {
      const ms = performance.now() - t;
      if (ms > 3) buf.push({ k: 'poolwait', at: Math.round(performance.timeOrigin + t), ms: Math.round(ms * 10) / 10, waiting, idle, total, max: this.options.max });
      return client;
    });
  };
}
