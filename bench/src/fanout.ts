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

/** A fan-out scenario's figures over raw `ws`'s at the same socket count (report.ts's withRatios). */
export interface Ratios {
  deliveriesPerSec: number | null;
  serverCpuUsPerDelivery: number | null;
  rssPerSocket: number | null;
  singleP99: number | null;
  fixedP99: number | null;
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
  /** Monotonic (µs) bounds of each saturation trial, to cut a CPU profile to them. */
  saturationWindowsUs: Array<[number, number]>;
}

interface Waiter {
  remaining: number;
  t: number;
  resolve: (t: number) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

/** The load-client processes (bench/src/worker.ts) and the bookkeeping of which events they all got. */
export class LoadClients {
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

interface PhaseTotals {
  valid: number;
  noncanonical: number;
  wrong: number;
  duplicate: number;
  latency: Histogram;
}

/**
 * Every fan-out measurement of one started target, in steps, so that several targets at the same socket
 * count can be measured side by side: `setup` (events, idle memory, sockets, loaded memory), then
 * `latencyPhases` (warm-up, single events, fixed rate), then `saturationTrial` k times, interleaved with
 * the other targets' trials so that all see the same background load, then `finish`. `close` stops the
 * load clients (never the target).
 */
export class FanoutRun {
  private readonly N: number;
  private readonly window: number;
  private readonly fixedEventsPerSec: number;
  private readonly fixedCount: number;
  private readonly started = wallNow();
  private readonly loadavgAtStart = loadavg().map((value) => round(value, 2));
  private readonly clients: LoadClients;
  private events: BenchEvent[] = [];
  private nextEvent = 0;
  private publishErrors = 0;
  private readonly publishCalls = new Map<string, Histogram>();
  private readonly trials: SaturationTrial[] = [];
  private readonly windowsUs: Array<[number, number]> = [];
  private publishCpuUsPerEvent = Number.NaN;
  private idle = { rssBytes: 0, heapUsedBytes: 0 };
  private loaded = { rssBytes: 0, heapUsedBytes: 0 };
  private connected = { subscribed: 0, failed: 0, errors: [] as string[] };
  private connectMs = 0;

  constructor(
    readonly id: string,
    readonly target: Target,
    private readonly config: FanoutConfig,
  ) {
    this.N = config.sockets;
    this.window = config.window === 'auto' ? Math.max(2, Math.ceil(8_000 / this.N)) : config.window;
    this.fixedEventsPerSec = config.fixedDeliveriesPerSec / this.N;
    this.fixedCount = Math.max(3, Math.round((this.fixedEventsPerSec * config.fixedMs) / 1000));
    this.clients = new LoadClients(Math.min(config.workers, this.N));
  }

  private log(line: string) {
    this.config.log(`  [${this.id}] ${line}`);
  }

  /** Events (and the price of one publish with nobody listening), idle memory, sockets, loaded memory. */
  async setup(): Promise<void> {
    const { config, target } = this;
    const perSecond = config.budgetDeliveriesPerSec / this.N;
    const warmupCount = Math.ceil((perSecond * config.warmupMs) / 1000) + this.window;
    const saturationCount =
      Math.ceil((perSecond * config.trialMs * config.trials) / 1000) + this.window * config.trials;
    const total = warmupCount + config.singleTrials + this.fixedCount + saturationCount;

    let t0 = wallNow();
    const calibration = await target.prepareEvents(config.calibrationEvents * 2);
    this.events = await target.prepareEvents(total);
    this.log(`prepared ${calibration.length + this.events.length} events in ${Math.round(wallNow() - t0)} ms`);
    // Half the calibration events warm the publish path up, the other half are measured.
    for (const event of calibration.slice(0, config.calibrationEvents)) await target.publish(event);
    const before = procSampleAll(target.pids);
    for (const event of calibration.slice(config.calibrationEvents)) await target.publish(event);
    this.publishCpuUsPerEvent = (procSampleAll(target.pids).cpuUs - before.cpuUs) / config.calibrationEvents;
    await sleep(config.pauseMs);
    this.idle = await memoryAfterGc(target.pids, target.inspectors, Math.min(200, config.pauseMs));

    t0 = wallNow();
    this.connected = await this.clients.connect(target, config);
    await waitForSubscriptions(target, this.connected.subscribed, 60_000);
    this.connectMs = wallNow() - t0;
    this.log(
      `${this.connected.subscribed}/${this.N} sockets subscribed in ${Math.round(this.connectMs)} ms` +
        (this.connected.failed ? ` (${this.connected.failed} failed: ${this.connected.errors[0]})` : ''),
    );
    await sleep(config.pauseMs * 3);
    this.loaded = await memoryAfterGc(target.pids, target.inspectors, Math.min(200, config.pauseMs));
    this.clients.setEvents(this.events);
    await sleep(config.pauseMs / 2);
  }

  private take(): number {
    return this.nextEvent < this.events.length ? this.nextEvent++ : -1;
  }

  private async publish(index: number, phase: string): Promise<number> {
    const { t, done } = this.clients.announce(index, phase, this.config.eventTimeoutMs);
    done.catch(() => {});
    try {
      await this.target.publish(this.events[index]!);
      const histogram = this.publishCalls.get(phase) ?? new Histogram();
      this.publishCalls.set(phase, histogram);
      histogram.record((wallNow() - t) * 1000);
    } catch (error) {
      this.publishErrors++;
      this.log(`publish failed: ${(error as Error).message}`);
    }
    return done;
  }

  /** Keeps `window` events in flight for `durationMs`; returns when the last one has been received. */
  private async saturate(phase: string, durationMs: number) {
    const start = wallNow();
    let completed = 0;
    let timedOut = 0;
    let lastDone = start;
    let ranOut = false;
    const lane = async () => {
      while (wallNow() - start < durationMs) {
        const index = this.take();
        if (index < 0) {
          ranOut = true;
          return;
        }
        try {
          lastDone = Math.max(lastDone, await this.publish(index, phase));
          completed++;
        } catch {
          timedOut++;
        }
      }
    };
    await Promise.all(Array.from({ length: this.window }, lane));
    return { start, lastDone, completed, timedOut, ranOut };
  }

  /** Warm-up, single events on an idle server, and the fixed moderate rate. */
  async latencyPhases(): Promise<void> {
    const { config } = this;
    this.log(`warm-up ${config.warmupMs} ms (window ${this.window})`);
    await this.saturate('warmup', config.warmupMs);
    await sleep(config.pauseMs);

    for (let trial = 0; trial < config.singleTrials; trial++) {
      const index = this.take();
      if (index < 0) break;
      await this.publish(index, `single-${trial}`).catch(() => {});
      await sleep(config.pauseMs);
    }

    // Open loop: publishes follow the clock, not the deliveries.
    this.log(
      `fixed rate: ${round(this.fixedEventsPerSec, 2)} events/s (${config.fixedDeliveriesPerSec} deliveries/s) × ${this.fixedCount}`,
    );
    const fixedStart = wallNow();
    const fixedDone: Promise<unknown>[] = [];
    for (let k = 0; k < this.fixedCount; k++) {
      const wait = fixedStart + (k * 1000) / this.fixedEventsPerSec - wallNow();
      if (wait > 0) await sleep(wait);
      const index = this.take();
      if (index < 0) break;
      fixedDone.push(this.publish(index, 'fixed').catch(() => {}));
    }
    await Promise.all(fixedDone);
    await sleep(config.pauseMs);
  }

  /** One saturation trial (phase `saturation-<k>`), with the CPU of the server, the clients and the machine. */
  async saturationTrial(k: number): Promise<SaturationTrial> {
    const phase = `saturation-${k}`;
    const { target, clients } = this;
    const windowStart = Number(process.hrtime.bigint() / 1000n);
    const server0 = procSampleAll(target.pids);
    const clients0 = procSampleAll(clients.pids);
    const self0 = process.cpuUsage();
    const machine0 = machineSample();
    const run = await this.saturate(phase, this.config.trialMs);
    const server1 = procSampleAll(target.pids);
    const clients1 = procSampleAll(clients.pids);
    const self1 = process.cpuUsage(self0);
    const machine1 = machineSample();
    this.windowsUs.push([windowStart, Number(process.hrtime.bigint() / 1000n)]);
    const durationMs = run.lastDone - run.start;
    const deliveries = run.completed * this.connected.subscribed;
    const busy = machine1.busyUs - machine0.busyUs;
    const totalCpu = machine1.totalUs - machine0.totalUs;
    const serverCpuUs = server1.cpuUs - server0.cpuUs;
    const clientCpuUs = clients1.cpuUs - clients0.cpuUs;
    const ours = serverCpuUs + clientCpuUs + self1.user + self1.system;
    const trial: SaturationTrial = {
      events: run.completed,
      serverCpuUs,
      clientCpuUs,
      deliveries,
      durationMs: round(durationMs, 1),
      deliveriesPerSec: Math.round((deliveries / durationMs) * 1000),
      serverCpuUsPerDelivery: round(serverCpuUs / deliveries, 2),
      clientCpuUsPerDelivery: round(clientCpuUs / deliveries, 2),
      otherLoadPct: round((Math.max(0, busy - ours) / totalCpu) * 100, 1),
      machineBusyPct: round((busy / totalCpu) * 100, 1),
      ranOutOfEvents: run.ranOut,
      timedOutEvents: run.timedOut,
    };
    this.trials.push(trial);
    this.log(
      `${phase}: ${trial.deliveriesPerSec} deliveries/s (${trial.events} events in ${Math.round(durationMs)} ms), ` +
        `server ${trial.serverCpuUsPerDelivery} µs/delivery, other load ${trial.otherLoadPct}%` +
        (run.ranOut ? ' [ran out of events]' : '') +
        (run.timedOut ? ` [${run.timedOut} events timed out]` : ''),
    );
    await sleep(this.config.pauseMs);
    return trial;
  }

  /** Collects the clients' checks and builds the result. */
  async finish(): Promise<FanoutResult> {
    const { config, target, trials } = this;
    const subscribed = this.connected.subscribed;
    await sleep(config.pauseMs);
    const stats = await this.clients.collect();
    const merged = new Map<string, PhaseTotals>();
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
    for (let index = 0; index < this.nextEvent; index++) {
      const got = stats.reduce((sum, reply) => sum + (reply.counts[index] ?? 0), 0);
      missing += Math.max(0, subscribed - got);
    }
    const sum = (key: 'valid' | 'noncanonical' | 'wrong' | 'duplicate') =>
      [...merged.values()].reduce((total, entry) => total + entry[key], 0);

    // Deliveries counted by the clients (frames checked) are what the trial's rate is made of.
    trials.forEach((entry, trial) => {
      const checked = merged.get(`saturation-${trial}`)?.valid ?? 0;
      if (checked !== entry.deliveries) {
        entry.deliveries = checked;
        entry.deliveriesPerSec = Math.round((checked / entry.durationMs) * 1000);
        entry.serverCpuUsPerDelivery = round(entry.serverCpuUs / checked, 2);
        entry.clientCpuUsPerDelivery = round(entry.clientCpuUs / checked, 2);
      }
    });

    const singles: LatencySummary[] = [];
    for (let trial = 0; trial < config.singleTrials; trial++) {
      const entry = merged.get(`single-${trial}`);
      if (entry) singles.push(entry.latency.summaryMs());
    }
    const fixed = merged.get('fixed');
    const result: FanoutResult = {
      id: this.id,
      label: target.label,
      notes: target.notes,
      sockets: this.N,
      subscribed,
      connect: { ms: Math.round(this.connectMs), failed: this.connected.failed, errors: this.connected.errors },
      rss: {
        idleMiB: round(this.idle.rssBytes / 2 ** 20, 1),
        loadedMiB: round(this.loaded.rssBytes / 2 ** 20, 1),
        perSocketKB: round((this.loaded.rssBytes - this.idle.rssBytes) / subscribed / 1024, 2),
        heapPerSocketKB: round((this.loaded.heapUsedBytes - this.idle.heapUsedBytes) / subscribed / 1024, 2),
      },
      publishCpuUsPerEvent: Math.round(this.publishCpuUsPerEvent),
      saturation: {
        window: this.window,
        trials,
        deliveriesPerSec: spread(trials.map((trial) => trial.deliveriesPerSec)),
        serverCpuUsPerDelivery: spread(trials.map((trial) => trial.serverCpuUsPerDelivery)),
        clientCpuUsPerDelivery: spread(trials.map((trial) => trial.clientCpuUsPerDelivery)),
        otherLoadPct: spread(trials.map((trial) => trial.otherLoadPct)),
      },
      fixed: {
        eventsPerSec: round(this.fixedEventsPerSec, 3),
        events: this.fixedCount,
        latency: (fixed?.latency ?? new Histogram()).summaryMs(),
        publishCallP50Ms: round((this.publishCalls.get('fixed')?.percentile(50) ?? Number.NaN) / 1000, 2),
      },
      single: {
        trials: singles,
        p50Ms: spread(singles.map((s) => s.p50Ms)),
        p99Ms: spread(singles.map((s) => s.p99Ms)),
        maxMs: spread(singles.map((s) => s.maxMs)),
      },
      correctness: {
        eventsPublished: this.nextEvent,
        expectedDeliveries: this.nextEvent * subscribed,
        valid: sum('valid'),
        noncanonical: sum('noncanonical'),
        wrong: sum('wrong'),
        duplicate: sum('duplicate'),
        missing,
        publishErrors: this.publishErrors,
        socketsClosed: stats.reduce((total, reply) => total + reply.closed, 0),
        samples: [
          ...stats.flatMap((reply) => reply.wrongSamples),
          ...stats.flatMap((reply) => reply.closeSamples),
        ].slice(0, 8),
      },
      serverCounters: await target.serverCounters().catch(() => ({})),
      loadavgAtStart: this.loadavgAtStart,
      durationMs: Math.round(wallNow() - this.started),
      saturationWindowsUs: this.windowsUs,
    };
    const c = result.correctness;
    this.log(
      `checked ${c.valid} deliveries: ${c.wrong} wrong, ${c.missing} missing, ${c.duplicate} duplicate` +
        (c.noncanonical ? `, ${c.noncanonical} correct but not byte-identical` : ''),
    );
    return result;
  }

  async close(): Promise<void> {
    await this.clients.close();
  }
}

/** Every fan-out measurement against one started target, on its own (the target keeps running). */
export async function runFanout(id: string, target: Target, config: FanoutConfig): Promise<FanoutResult> {
  const run = new FanoutRun(id, target, config);
  try {
    await run.setup();
    await run.latencyPhases();
    for (let k = 0; k < config.trials; k++) await run.saturationTrial(k);
    return await run.finish();
  } finally {
    await run.close();
  }
}
