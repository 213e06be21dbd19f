import { type ChildProcess, fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import {
  Histogram,
  type LatencySummary,
  machineSample,
  procSampleAll,
  ROOT,
  round,
  type Spread,
  sleep,
  spread,
  stopChild,
  TSX_IMPORT,
  track,
  wallNow,
} from './common.js';
import { memoryAfterGc } from './inspector.js';
import type { BenchEvent, ConnectedReply, StatsReply, WorkerCommand, WorkerReply } from './protocol.js';
import { type Target, waitForSubscriptions } from './targets.js';

const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));

export interface FanoutConfig {
  sockets: number;
  /** Load-client processes. */
  workers: number;
  /** Source addresses for the client sockets (127.0.0.x), used round-robin. */
  localAddresses: string[];
  /** Connections each worker opens at once. */
  connectConcurrency: number;
  /** Saturation run before measuring (JIT, pools), not reported except for correctness. */
  warmupMs: number;
  /** Saturation trials. */
  trials: number;
  trialMs: number;
  /** Events in flight during saturation; `auto`: enough to keep ~8k deliveries outstanding (≥ 2 events). */
  window: number | 'auto';
  /** The fixed moderate rate, in deliveries per second (events/s = this / sockets). */
  fixedDeliveriesPerSec: number;
  fixedMs: number;
  /** Single events to all sockets, one at a time on an otherwise idle server. */
  singleTrials: number;
  /** Events published with no socket connected, to price one publish (server CPU per publish call). */
  calibrationEvents: number;
  /**
   * Events are made before the run (Herald: drafts). Saturation gets enough for this many deliveries/s;
   * a faster server runs out early and its trial is just shorter (reported).
   */
  budgetDeliveriesPerSec: number;
  /** An event not received by every socket within this is given up (its deliveries count as missing). */
  eventTimeoutMs: number;
  /** Pause between phases, so one phase's tail doesn't run into the next (settling after connect: 3×). */
  pauseMs: number;
  log: (line: string) => void;
}

export interface SaturationTrial {
  events: number;
  serverCpuUs: number;
  clientCpuUs: number;
  deliveries: number;
  durationMs: number;
  deliveriesPerSec: number;
  serverCpuUsPerDelivery: number;
  clientCpuUsPerDelivery: number;
  /** Share of the machine's CPU used by processes outside this bench during the trial. */
  otherLoadPct: number;
  machineBusyPct: number;
  ranOutOfEvents: boolean;
  timedOutEvents: number;
}

export interface Correctness {
  eventsPublished: number;
  expectedDeliveries: number;
  valid: number;
  noncanonical: number;
  wrong: number;
  duplicate: number;
  missing: number;
  publishErrors: number;
  socketsClosed: number;
  samples: string[];
}

export interface FanoutResult {
  id: string;
  label: string;
  notes: string[];
  sockets: number;
  subscribed: number;
  connect: { ms: number; failed: number; errors: string[] };
  /** Server memory after a forced full GC: idle (no socket) and with every socket subscribed. */
  rss: { idleMiB: number; loadedMiB: number; perSocketKB: number; heapPerSocketKB: number };
  publishCpuUsPerEvent: number;
  saturation: {
    window: number;
    trials: SaturationTrial[];
    deliveriesPerSec: Spread;
    serverCpuUsPerDelivery: Spread;
    clientCpuUsPerDelivery: Spread;
    otherLoadPct: Spread;
  };
  fixed: { eventsPerSec: number; events: number; latency: LatencySummary; publishCallP50Ms: number };
  single: { trials: LatencySummary[]; p50Ms: Spread; p99Ms: Spread; maxMs: Spread };
  correctness: Correctness;
  serverCounters: Record<string, number>;
  loadavgAtStart: number[];
  durationMs: number;
  /** Monotonic (µs) bounds of the saturation trials, to cut a CPU profile to them. */
  saturationWindowUs: [number, number];
}

interface Waiter {
  remaining: number;
  t: number;
  resolve: (t: number) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

/** The load-client processes (bench/src/worker.ts) and the bookkeeping of which events they all got. */
class LoadClients {
  readonly workers: ChildProcess[];
  private readonly waiters = new Map<number, Waiter>();
  private readonly oneOff = new Map<ChildProcess, (reply: WorkerReply) => void>();

  constructor(count: number) {
    this.workers = Array.from({ length: count }, () => {
      const child = track(
        fork(WORKER, [], {
          cwd: ROOT,
          execArgv: [
            ...(process.env.BENCH_WORKER_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_WORKER_PROF}`] : []),
            '--import',
            TSX_IMPORT,
          ],
          serialization: 'advanced',
          stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        }),
      );
      child.on('message', (reply: WorkerReply) => this.onReply(child, reply));
      return child;
    });
  }

  get pids(): number[] {
    return this.workers.map((worker) => worker.pid!);
  }

  private onReply(worker: ChildProcess, reply: WorkerReply) {
    if (reply.type === 'eventDone') {
      const waiter = this.waiters.get(reply.index);
      if (!waiter) return;
      waiter.t = Math.max(waiter.t, reply.t);
      if (--waiter.remaining === 0) {
        clearTimeout(waiter.timer);
        this.waiters.delete(reply.index);
        waiter.resolve(waiter.t);
      }
      return;
    }
    const handler = this.oneOff.get(worker);
    this.oneOff.delete(worker);
    handler?.(reply);
  }

  private ask<T extends WorkerReply>(worker: ChildProcess, command: WorkerCommand): Promise<T> {
    return new Promise((resolve) => {
      this.oneOff.set(worker, (reply) => resolve(reply as T));
      worker.send(command);
    });
  }

  async connect(
    target: Target,
    config: FanoutConfig,
  ): Promise<{ subscribed: number; failed: number; errors: string[] }> {
    const per = Math.floor(config.sockets / this.workers.length);
    const extra = config.sockets % this.workers.length;
    let firstIndex = 0;
    const replies = await Promise.all(
      this.workers.map((worker, w) => {
        const count = per + (w < extra ? 1 : 0);
        const command: WorkerCommand = {
          type: 'connect',
          urls: target.wsUrls,
          firstIndex,
          count,
          token: target.token,
          orgId: target.orgId,
          localAddresses: config.localAddresses,
          concurrency: config.connectConcurrency,
        };
        firstIndex += count;
        return this.ask<ConnectedReply>(worker, command);
      }),
    );
    return {
      subscribed: replies.reduce((sum, reply) => sum + reply.subscribed, 0),
      failed: replies.reduce((sum, reply) => sum + reply.failed, 0),
      errors: replies.flatMap((reply) => reply.errors),
    };
  }

  setEvents(events: BenchEvent[]) {
    for (const worker of this.workers) worker.send({ type: 'events', events } satisfies WorkerCommand);
  }

  /** Tells the workers event `index` is being published now; resolves when every socket has it. */
  announce(index: number, phase: string, timeoutMs: number): { t: number; done: Promise<number> } {
    const done = new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(index);
        reject(new Error(`event ${index} not received by every socket within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.set(index, { remaining: this.workers.length, t: 0, resolve, reject, timer });
    });
    const t = wallNow();
    for (const worker of this.workers) worker.send({ type: 'publish', index, phase, t } satisfies WorkerCommand);
    return { t, done };
  }

  collect(): Promise<StatsReply[]> {
    return Promise.all(this.workers.map((worker) => this.ask<StatsReply>(worker, { type: 'collect' })));
  }

  async close() {
    for (const worker of this.workers) {
      if (worker.connected) worker.send({ type: 'close' } satisfies WorkerCommand);
    }
    await Promise.all(this.workers.map((worker) => stopChild(worker, 'SIGTERM', 5_000)));
  }
}

/** Runs every fan-out measurement against one started target, then leaves the target running. */
export async function runFanout(id: string, target: Target, config: FanoutConfig): Promise<FanoutResult> {
  const started = wallNow();
  const loadavgAtStart = loadavg().map((value) => round(value, 2));
  const { log } = config;
  const N = config.sockets;
  const window = config.window === 'auto' ? Math.max(2, Math.ceil(8_000 / N)) : config.window;
  const fixedEventsPerSec = config.fixedDeliveriesPerSec / N;
  const fixedCount = Math.max(3, Math.round((fixedEventsPerSec * config.fixedMs) / 1000));
  const perSecond = config.budgetDeliveriesPerSec / N;
  const warmupCount = Math.ceil((perSecond * config.warmupMs) / 1000) + window;
  const saturationCount = Math.ceil((perSecond * config.trialMs * config.trials) / 1000) + window * config.trials;
  const total = warmupCount + config.singleTrials + fixedCount + saturationCount;

  // 1. Events, and the price of one publish with nobody listening.
  let t0 = wallNow();
  const calibration = await target.prepareEvents(config.calibrationEvents * 2);
  const events = await target.prepareEvents(total);
  log(`  prepared ${calibration.length + events.length} events in ${Math.round(wallNow() - t0)} ms`);
  // Half the calibration events warm the publish path up, the other half are measured.
  for (const event of calibration.slice(0, config.calibrationEvents)) await target.publish(event);
  const beforeCalibration = procSampleAll(target.pids);
  for (const event of calibration.slice(config.calibrationEvents)) await target.publish(event);
  const publishCpuUsPerEvent = (procSampleAll(target.pids).cpuUs - beforeCalibration.cpuUs) / config.calibrationEvents;
  await sleep(config.pauseMs);
  const idle = await memoryAfterGc(target.pids, target.inspectors, Math.min(200, config.pauseMs));

  // 2. Sockets.
  const clients = new LoadClients(Math.min(config.workers, N));
  try {
    t0 = wallNow();
    const connected = await clients.connect(target, config);
    await waitForSubscriptions(target, connected.subscribed, 60_000);
    const connectMs = wallNow() - t0;
    log(
      `  ${connected.subscribed}/${N} sockets subscribed in ${Math.round(connectMs)} ms` +
        (connected.failed ? ` (${connected.failed} failed: ${connected.errors[0]})` : ''),
    );
    await sleep(config.pauseMs * 3);
    const loaded = await memoryAfterGc(target.pids, target.inspectors, Math.min(200, config.pauseMs));
    const subscribed = connected.subscribed;
    clients.setEvents(events);
    await sleep(config.pauseMs / 2);

    let nextEvent = 0;
    let publishErrors = 0;
    const publishCalls = new Map<string, Histogram>();
    const take = () => (nextEvent < events.length ? nextEvent++ : -1);
    const publish = async (index: number, phase: string) => {
      const { t, done } = clients.announce(index, phase, config.eventTimeoutMs);
      done.catch(() => {});
      try {
        await target.publish(events[index]!);
        const histogram = publishCalls.get(phase) ?? new Histogram();
        publishCalls.set(phase, histogram);
        histogram.record((wallNow() - t) * 1000);
      } catch (error) {
        publishErrors++;
        log(`  publish failed: ${(error as Error).message}`);
      }
      return done;
    };

    /** Keeps `window` events in flight for `durationMs`; returns when the last one has been received. */
    const saturate = async (phase: string, durationMs: number) => {
      const start = wallNow();
      let completed = 0;
      let timedOut = 0;
      let lastDone = start;
      let ranOut = false;
      const lane = async () => {
        while (wallNow() - start < durationMs) {
          const index = take();
          if (index < 0) {
            ranOut = true;
            return;
          }
          try {
            lastDone = Math.max(lastDone, await publish(index, phase));
            completed++;
          } catch {
            timedOut++;
          }
        }
      };
      await Promise.all(Array.from({ length: window }, lane));
      return { start, lastDone, completed, timedOut, ranOut };
    };

    // 3. Warm-up.
    log(`  warm-up ${config.warmupMs} ms (window ${window})`);
    await saturate('warmup', config.warmupMs);
    await sleep(config.pauseMs);

    // 4. One event to every socket, on an idle server.
    for (let trial = 0; trial < config.singleTrials; trial++) {
      const index = take();
      if (index < 0) break;
      await publish(index, `single-${trial}`).catch(() => {});
      await sleep(config.pauseMs);
    }

    // 5. Fixed moderate rate (open loop: publishes follow the clock, not the deliveries).
    log(
      `  fixed rate: ${round(fixedEventsPerSec, 2)} events/s (${config.fixedDeliveriesPerSec} deliveries/s) × ${fixedCount}`,
    );
    const fixedStart = wallNow();
    const fixedDone: Promise<unknown>[] = [];
    for (let k = 0; k < fixedCount; k++) {
      const due = fixedStart + (k * 1000) / fixedEventsPerSec;
      const wait = due - wallNow();
      if (wait > 0) await sleep(wait);
      const index = take();
      if (index < 0) break;
      fixedDone.push(publish(index, 'fixed').catch(() => {}));
    }
    await Promise.all(fixedDone);
    await sleep(config.pauseMs);

    // 6. Saturation trials.
    const trials: SaturationTrial[] = [];
    const windowStartUs = Number(process.hrtime.bigint() / 1000n);
    for (let trial = 0; trial < config.trials; trial++) {
      const phase = `saturation-${trial}`;
      const server0 = procSampleAll(target.pids);
      const clients0 = procSampleAll(clients.pids);
      const self0 = process.cpuUsage();
      const machine0 = machineSample();
      const run = await saturate(phase, config.trialMs);
      const server1 = procSampleAll(target.pids);
      const clients1 = procSampleAll(clients.pids);
      const self1 = process.cpuUsage(self0);
      const machine1 = machineSample();
      const durationMs = run.lastDone - run.start;
      const deliveries = run.completed * subscribed;
      const busy = machine1.busyUs - machine0.busyUs;
      const totalCpu = machine1.totalUs - machine0.totalUs;
      const ours = server1.cpuUs - server0.cpuUs + (clients1.cpuUs - clients0.cpuUs) + self1.user + self1.system;
      trials.push({
        events: run.completed,
        serverCpuUs: server1.cpuUs - server0.cpuUs,
        clientCpuUs: clients1.cpuUs - clients0.cpuUs,
        deliveries,
        durationMs: round(durationMs, 1),
        deliveriesPerSec: Math.round((deliveries / durationMs) * 1000),
        serverCpuUsPerDelivery: round((server1.cpuUs - server0.cpuUs) / deliveries, 2),
        clientCpuUsPerDelivery: round((clients1.cpuUs - clients0.cpuUs) / deliveries, 2),
        otherLoadPct: round((Math.max(0, busy - ours) / totalCpu) * 100, 1),
        machineBusyPct: round((busy / totalCpu) * 100, 1),
        ranOutOfEvents: run.ranOut,
        timedOutEvents: run.timedOut,
      });
      const last = trials.at(-1)!;
      log(
        `  ${phase}: ${last.deliveriesPerSec} deliveries/s (${last.events} events in ${Math.round(durationMs)} ms), ` +
          `server ${last.serverCpuUsPerDelivery} µs/delivery, other load ${last.otherLoadPct}%` +
          (run.ranOut ? ' [ran out of events]' : '') +
          (run.timedOut ? ` [${run.timedOut} events timed out]` : ''),
      );
      await sleep(config.pauseMs);
    }
    const windowEndUs = Number(process.hrtime.bigint() / 1000n);

    // 7. Tally.
    await sleep(config.pauseMs);
    const stats = await clients.collect();
    const merged = new Map<
      string,
      { valid: number; noncanonical: number; wrong: number; duplicate: number; latency: Histogram }
    >();
    for (const reply of stats) {
      for (const [name, phase] of Object.entries(reply.phases)) {
        const entry = merged.get(name) ?? {
          valid: 0,
          noncanonical: 0,
          wrong: 0,
          duplicate: 0,
          latency: new Histogram(),
        };
        merged.set(name, entry);
        entry.valid += phase.valid;
        entry.noncanonical += phase.noncanonical;
        entry.wrong += phase.wrong;
        entry.duplicate += phase.duplicate;
        entry.latency.merge(phase.latency);
      }
    }
    let missing = 0;
    for (let index = 0; index < nextEvent; index++) {
      const got = stats.reduce((sum, reply) => sum + (reply.counts[index] ?? 0), 0);
      missing += Math.max(0, subscribed - got);
    }
    const sum = (key: 'valid' | 'noncanonical' | 'wrong' | 'duplicate') =>
      [...merged.values()].reduce((total, entry) => total + entry[key], 0);

    // Deliveries counted by the clients (frames checked) must agree with the trial's count.
    for (let trial = 0; trial < trials.length; trial++) {
      const checked = merged.get(`saturation-${trial}`)?.valid ?? 0;
      const entry = trials[trial]!;
      if (checked !== entry.deliveries) {
        entry.deliveries = checked;
        entry.deliveriesPerSec = Math.round((checked / entry.durationMs) * 1000);
        entry.serverCpuUsPerDelivery = round(entry.serverCpuUs / checked, 2);
        entry.clientCpuUsPerDelivery = round(entry.clientCpuUs / checked, 2);
      }
    }

    const singles: LatencySummary[] = [];
    for (let trial = 0; trial < config.singleTrials; trial++) {
      const entry = merged.get(`single-${trial}`);
      if (entry) singles.push(entry.latency.summaryMs());
    }
    const fixed = merged.get('fixed');
    const result: FanoutResult = {
      id,
      label: target.label,
      notes: target.notes,
      sockets: N,
      subscribed,
      connect: { ms: Math.round(connectMs), failed: connected.failed, errors: connected.errors },
      rss: {
        idleMiB: round(idle.rssBytes / 2 ** 20, 1),
        loadedMiB: round(loaded.rssBytes / 2 ** 20, 1),
        perSocketKB: round((loaded.rssBytes - idle.rssBytes) / subscribed / 1024, 2),
        heapPerSocketKB: round((loaded.heapUsedBytes - idle.heapUsedBytes) / subscribed / 1024, 2),
      },
      publishCpuUsPerEvent: Math.round(publishCpuUsPerEvent),
      saturation: {
        window,
        trials,
        deliveriesPerSec: spread(trials.map((trial) => trial.deliveriesPerSec)),
        serverCpuUsPerDelivery: spread(trials.map((trial) => trial.serverCpuUsPerDelivery)),
        clientCpuUsPerDelivery: spread(trials.map((trial) => trial.clientCpuUsPerDelivery)),
        otherLoadPct: spread(trials.map((trial) => trial.otherLoadPct)),
      },
      fixed: {
        eventsPerSec: round(fixedEventsPerSec, 3),
        events: fixedCount,
        latency: (fixed?.latency ?? new Histogram()).summaryMs(),
        publishCallP50Ms: round((publishCalls.get('fixed')?.percentile(50) ?? Number.NaN) / 1000, 2),
      },
      single: {
        trials: singles,
        p50Ms: spread(singles.map((s) => s.p50Ms)),
        p99Ms: spread(singles.map((s) => s.p99Ms)),
        maxMs: spread(singles.map((s) => s.maxMs)),
      },
      correctness: {
        eventsPublished: nextEvent,
        expectedDeliveries: nextEvent * subscribed,
        valid: sum('valid'),
        noncanonical: sum('noncanonical'),
        wrong: sum('wrong'),
        duplicate: sum('duplicate'),
        missing,
        publishErrors,
        socketsClosed: stats.reduce((total, reply) => total + reply.closed, 0),
        samples: [
          ...stats.flatMap((reply) => reply.wrongSamples),
          ...stats.flatMap((reply) => reply.closeSamples),
        ].slice(0, 8),
      },
      serverCounters: await target.serverCounters().catch(() => ({})),
      loadavgAtStart,
      durationMs: Math.round(wallNow() - started),
      saturationWindowUs: [windowStartUs, windowEndUs],
    };
    const c = result.correctness;
    log(
      `  checked ${c.valid} deliveries: ${c.wrong} wrong, ${c.missing} missing, ${c.duplicate} duplicate` +
        (c.noncanonical ? `, ${c.noncanonical} correct but not byte-identical` : ''),
    );
    return result;
  } finally {
    await clients.close();
  }
}
