import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { cleanupAll } from './src/common.js';
import { type FanoutConfig, type FanoutResult, runFanout } from './src/fanout.js';
import { runFootprint } from './src/footprint.js';
import { type HttpConfig, runHttp } from './src/http.js';
import { startNginxTarget } from './src/nginx3.js';
import { PEERS } from './src/protocol.js';
import { resumeMarkdown, runResumeCatchUp } from './src/resume.js';
import { startHeraldTarget, startPeerTarget, startRawTarget, type Target } from './src/targets.js';
import { runTokenVerify, tokenVerifyMarkdown } from './src/token-verify.js';
import { runTracing, tracingMarkdown } from './src/tracing.js';
import {
  besideRatio,
  buildDispatcherImage,
  renderWebhookEngineNotes,
  renderWebhookEngineRows,
  runWebhooks,
} from './src/webhooks.js';

// The benchmark's own machinery at toy size: 50 sockets in 2 client processes, a few events, every
// frame checked. Correctness only: no timing is asserted (the numbers come from `pnpm bench`).

const SOCKETS = 50;

const config: FanoutConfig = {
  sockets: SOCKETS,
  workers: 2,
  localAddresses: ['127.0.0.2', '127.0.0.3'],
  connectConcurrency: 25,
  warmupMs: 200,
  trials: 1,
  trialMs: 300,
  window: 2,
  fixedDeliveriesPerSec: 500, // 10 events/s
  fixedMs: 300,
  singleTrials: 2,
  calibrationEvents: 2,
  budgetDeliveriesPerSec: 5_000,
  eventTimeoutMs: 10_000,
  pauseMs: 50,
  log: () => {},
};

/** Just enough to publish a handful of events (1 single, 3 at the fixed rate) with a short give-up time. */
const faultConfig: FanoutConfig = {
  ...config,
  workers: 1,
  warmupMs: 0,
  trials: 0,
  singleTrials: 1,
  eventTimeoutMs: 1_000,
};

async function measure(start: () => Promise<Target>, run: FanoutConfig = config): Promise<FanoutResult> {
  const target = await start();
  try {
    return await runFanout('smoke', target, run);
  } finally {
    await target.stop();
  }
}

function expectEveryFrameRight(result: FanoutResult) {
  const c = result.correctness;
  expect(result.subscribed).toBe(SOCKETS);
  expect(c.eventsPublished).toBeGreaterThanOrEqual(5);
  expect({ wrong: c.wrong, missing: c.missing, duplicate: c.duplicate, publishErrors: c.publishErrors }).toEqual({
    wrong: 0,
    missing: 0,
    duplicate: 0,
    publishErrors: 0,
  });
  expect(c.valid).toBe(c.eventsPublished * SOCKETS);
  expect(c.socketsClosed).toBe(0);
}

afterAll(() => cleanupAll());

// Concurrent: the servers and clients of different tests never meet (own ports, schemas, orgs).
describe.concurrent('pnpm bench, smoke size', () => {
  it('raw ws baseline: every socket gets every event once, byte for byte', async () => {
    const result = await measure(() => startRawTarget(), { ...config, workers: 1 });
    expectEveryFrameRight(result);
    expect(result.correctness.noncanonical).toBe(0);
  });

  it.each(PEERS)('peer %s: every socket gets every event once, checked frame by frame', async (peer) => {
    const result = await measure(() => startPeerTarget(peer), { ...config, workers: 1 });
    expectEveryFrameRight(result);
  });

  it("counts a frame carrying another socket's subscription id as wrong, and its event as missing", async () => {
    const result = await measure(() => startRawTarget('wrong-id'), faultConfig);
    expect(result.correctness.valid).toBe(0);
    expect(result.correctness.wrong).toBe(result.correctness.eventsPublished * SOCKETS);
    expect(result.correctness.missing).toBe(result.correctness.eventsPublished * SOCKETS);
  });

  it('counts dropped and duplicated deliveries', async () => {
    const [dropped, doubled] = await Promise.all([
      measure(() => startRawTarget('drop'), faultConfig),
      measure(() => startRawTarget('duplicate'), faultConfig),
    ]);
    expect(dropped.correctness.missing).toBe(dropped.correctness.eventsPublished * (SOCKETS / 10));
    expect(dropped.correctness.wrong).toBe(0);
    expect(doubled.correctness.duplicate).toBe(doubled.correctness.eventsPublished * (SOCKETS / 10));
    expect(doubled.correctness.missing).toBe(0);
    expect(doubled.correctness.valid).toBe(doubled.correctness.eventsPublished * SOCKETS);
  });

  it('Herald embedded (in-memory pub/sub): every socket gets every published post once, checked', async () => {
    const result = await measure(() =>
      startHeraldTarget({
        pods: 1,
        pubsub: 'memory',
        databaseUrl: inject('databaseUrl'),
        database: 'postgres',
        label: 'smoke embedded',
      }),
    );
    expectEveryFrameRight(result);
  });

  it('Herald two pods + Redis: sockets on both pods, publishes through one, every frame checked', async () => {
    const result = await measure(() =>
      startHeraldTarget({
        pods: 2,
        pubsub: 'redis',
        databaseUrl: inject('databaseUrl'),
        redisUrl: inject('redisUrl'),
        database: 'postgres',
        label: 'smoke redis',
      }),
    );
    expectEveryFrameRight(result);
  });

  // Three pods and nginx: on a loaded 2-core machine their set-up alone can take most of a minute.
  it("Herald three pods behind deploy/'s nginx: nginx spreads the sockets over every pod, every frame checked", async () => {
    const target = await startNginxTarget({
      databaseUrl: inject('databaseUrl'),
      redisUrl: inject('redisUrl'),
      label: 'smoke nginx3',
    });
    try {
      const result = await runFanout('smoke', target, config);
      expectEveryFrameRight(result);
      const spread = target.spread();
      expect(spread?.perPod).toHaveLength(3);
      expect(spread?.perPod.reduce((a, b) => a + b, 0)).toBe(SOCKETS);
      expect(spread?.min).toBeGreaterThan(0);
      expect(result.notes.join(' ')).toContain('nginx spread the sockets');
      expect(result.serverCounters.nginx_spread_pod3_sockets).toBe(spread?.perPod[2]);
      expect(result.serverCounters.nginx_cpu_us_per_delivery).toBeGreaterThanOrEqual(0);
      expect(result.notes.join(' ')).not.toContain('not measured');
    } finally {
      await target.stop();
    }
  }, 180_000);
});

describe('pnpm bench token-verify section, smoke size', () => {
  it('runs every verifier on real tokens and renders one row each', async () => {
    const result = await runTokenVerify({ iterations: 50, trials: 1, clients: 4 });
    expect(result.rows.map((row) => row.label)).toHaveLength(4);
    for (const row of result.rows) expect(row.verifiesPerSec).toBeGreaterThan(0);
    const markdown = tokenVerifyMarkdown(result).join('\n');
    expect(markdown).toContain('Herald verifier (verified-token cache, 4 tokens)');
    expect(tokenVerifyMarkdown(null).join('\n')).toContain('Not run.');
  });
});

describe('besideRatio', () => {
  it('is a run over the mean of the durable trials before and after it, and null without both', () => {
    expect(besideRatio(6_000, 10_000, 14_000)).toEqual({ trials: [10_000, 14_000], ratio: 0.5 });
    expect(besideRatio(6_000, undefined, 14_000)).toBeNull();
    expect(besideRatio(undefined, 10_000, 14_000)).toBeNull();
  });
});

describe('bench smoke: webhooks (engine section)', () => {
  /** Toy size: one short raw trial on 2 connections, backlogs of 20 events. */
  const smallWebhooks = () => ({
    databaseUrl: inject('databaseUrl'),
    redisUrl: inject('redisUrl'),
    trials: 1,
    trialMs: 300,
    connections: 2,
    dispatcherEvents: 20,
    dispatcherTimeoutMs: 60_000,
    log: () => {},
  });

  it('raw loop, raw durable loop, one cold dispatcher twice, one warm and two dispatchers (one endpoint and two), a FIFO endpoint in outbox order, the scheduler pass: every delivery verified, none lost', async () => {
    const logged: string[] = [];
    const result = await runWebhooks({
      ...smallWebhooks(),
      log: (line: string) => logged.push(line),
      traceFanOut: true,
      pendingRetries: 1_000,
      steadyEventsPerSec: 50,
      steadyMs: 400,
      endpoints: 2,
      warmUpEvents: 10,
      newProcessRuns: 2,
    });
    expect(result.rawLoop.trials[0]?.requests).toBeGreaterThan(0);
    // The durable loop recorded what it sent (it counts a request only once its INSERT committed).
    expect(result.durableLoop?.trials[0]?.requests).toBeGreaterThan(0);
    expect(result.durableLoop?.trials[0]?.errors).toBe(0);
    // The receiver checked the durable loop's signatures as it checks the dispatchers'.
    expect(result.durableLoop?.trials[0]?.verified).toBe(result.durableLoop?.trials[0]?.requests);
    expect(result.durableLoop?.trials[0]?.invalid).toBe(0);
    expect(result.durableLoop?.trials[0]?.machine?.usPerDelivery).toBeGreaterThan(0);
    // A duplicate's evidence (receiver arrivals, the database's deliveries and attempts), printed in full.
    for (const run of [
      result.dispatcher,
      result.twoDispatchers,
      result.steady,
      result.multiEndpoint?.dispatcher,
      result.multiEndpoint?.twoDispatchers,
    ]) {
      if (run?.duplicates) console.error('webhook duplicates:', JSON.stringify(run.duplicates, null, 1));
    }
    expect(result.newProcessRepeats).toHaveLength(1);
    for (const run of [
      result.dispatcher,
      result.newProcessRepeats?.[0]?.run,
      result.warmDispatcher,
      result.twoDispatchers,
    ]) {
      expect(run).toMatchObject({ status: 'ok', events: 20, verified: 20, invalid: 0, duplicate: 0 });
    }
    // The warm run counts only the backlog: its warm-up's 10 deliveries were reset at the receiver.
    expect(result.warmUpEvents).toBe(10);
    // A durable trial before the first dispatcher run, one after it and after its second run (a new process
    // again), one after the warm run: each run's "beside" ratio is over the mean of the two around it.
    const durable = result.durableLoop!.trials.map((trial) => trial.deliveriesPerSec);
    expect(durable).toHaveLength(4);
    expect(result.beside.dispatcher?.trials).toEqual([durable[0], durable[1]]);
    expect(result.newProcessRepeats?.[0]?.beside?.trials).toEqual([durable[1], durable[2]]);
    expect(result.beside.warm?.trials).toEqual([durable[2], durable[3]]);
    expect(result.beside.warm?.ratio).toBeCloseTo(
      result.warmDispatcher!.deliveriesPerSec! / ((durable[2]! + durable[3]!) / 2),
      2,
    );
    expect(result.dispatcher.machine?.usPerDelivery).toBeGreaterThan(0);
    expect(result.dispatcher.machine?.busyShare).toBeGreaterThan(0);
    expect(result.steady).toMatchObject({ status: 'ok', events: 20, verified: 20, duplicate: 0 });
    expect(result.steady?.latency?.published).toBe(20);
    expect(Number.isFinite(result.steady?.latency?.fromCommit.p99Ms)).toBe(true);
    // The publisher's own delays, one reading per published event: a call's answer comes after its start.
    expect(result.steady?.latency?.publisher?.call.p50Ms).toBeGreaterThan(0);
    expect(Number.isFinite(result.steady?.latency?.publisher?.late.p99Ms)).toBe(true);
    expect(result.dispatcher.queriesPerDelivery).toBeGreaterThan(0);
    // Read from /proc in 10 ms clock ticks: 20 deliveries may cost the backends less than one, so zero is a
    // valid reading here; a number it must be (undefined or NaN: the backends were not found or not read).
    expect(Number.isFinite(result.dispatcher.pgCpuUsPerDelivery)).toBe(true);
    // Several endpoints: every event at each of them, verified per endpoint; the raw durable loop at 2 × 2 connections.
    expect(result.multiEndpoint).toMatchObject({ endpoints: 2, deliveries: 40 });
    expect(result.multiEndpoint?.durableLoop?.connections).toBe(4);
    for (const run of [result.multiEndpoint?.dispatcher, result.multiEndpoint?.twoDispatchers]) {
      expect(run).toMatchObject({ status: 'ok', events: 40, verified: 40, invalid: 0, duplicate: 0 });
    }
    expect(result.schedulerPass?.pendingRetries).toBe(1_000);
    expect(Number.isFinite(result.schedulerPass?.passMs.median)).toBe(true);
    // The FIFO run (on by default): the same backlog to one FIFO endpoint, each event at its outbox place.
    expect(result.fifoDispatcher).toMatchObject({
      status: 'ok',
      events: 20,
      verified: 20,
      duplicate: 0,
      order: { checked: 20, misplaced: 0 },
    });
    const markdown = [...renderWebhookEngineRows(result), ...renderWebhookEngineNotes(result)].join('\n');
    expect(markdown).toContain('raw durable loop');
    expect(markdown).toContain('- the publisher: each call started');
    // traceFanOut: each backlog run logs when its outbox was fully fanned out, with what was verified by then.
    const fanOutLines = logged.filter((line) => line.includes('fan-out done (since ready): '));
    expect(fanOutLines.length).toBeGreaterThanOrEqual(2);
    for (const line of fanOutLines) {
      const done = JSON.parse(line.split('fan-out done (since ready): ')[1]!);
      expect(done.ms).toBeGreaterThanOrEqual(0);
      expect(done.verified).toBeLessThanOrEqual(40);
      expect(Number.isFinite(done.pgCpuMs)).toBe(true);
    }
    expect(markdown).toContain('two dispatchers over one');
    expect(markdown).toContain('one warm dispatcher (it first delivered 10 events');
    expect(markdown).toContain('receiver verified');
    expect(markdown).toContain("publishPost's commit → receiver");
    expect(markdown).toContain('2 endpoints on the same receiver');
    expect(markdown).toContain('its trials just before and after the run');
    expect(markdown).toContain('one FIFO endpoint (one dispatcher from a new process');
    expect(markdown).toContain('0 of 20 events out of outbox order');
    expect(markdown).toContain('one dispatcher from a new process, 2 runs');
    expect(markdown).toContain('2 of 2 ok (every event verified once)');
    expect(result.dispatchers).toBe('source');
    // 147 s in a clean CI run beside the rest of the suite: room for a loaded machine.
  }, 360_000);

  it("runs the dispatcher from its production build with the image's node flags, its round trips still counted", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'herald-bench-smoke-image-'));
    try {
      const dispatcherBuild = await buildDispatcherImage(dir);
      expect(dispatcherBuild.args.at(-1)).toBe('dist/main.js');
      expect(dispatcherBuild.args).toContain('--enable-source-maps');
      const result = await runWebhooks({
        ...smallWebhooks(),
        pendingRetries: 100,
        steadyEventsPerSec: 0,
        endpoints: 1,
        warmUpEvents: 0,
        twoDispatchers: false,
        fifo: false,
        dispatcherBuild,
      });
      expect(result.dispatchers).toBe('image');
      expect(result.dispatcher).toMatchObject({ status: 'ok', events: 20, verified: 20, invalid: 0, duplicate: 0 });
      // The query counter, compiled beside the build, patched the build's own pg.
      expect(result.dispatcher.queriesPerDelivery).toBeGreaterThan(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 240_000);
});

describe('pnpm bench, resume section at smoke size', () => {
  it('clients resuming from one cursor each get every replayed event once', async () => {
    const result = await runResumeCatchUp({
      clients: 5,
      events: 20,
      databaseUrl: inject('databaseUrl'),
      redisUrl: inject('redisUrl'),
      timeoutMs: 60_000,
    });
    expect(result).toMatchObject({ clients: 5, eventsPerClient: 20, complete: 5, delivered: 100 });
    expect(resumeMarkdown(result)).toContain('5/5 got every event exactly');
  });
});

/** The HTTP section at toy size: 4 connections, one short trial per target and operation. */
const httpConfig = (overrides: Partial<HttpConfig>): HttpConfig => ({
  databaseUrl: inject('databaseUrl'),
  targets: ['raw', 'herald', 'herald-start', 'yoga', 'herald-pglite'],
  operations: ['posts', 'me', 'createPost', 'publishPost'],
  connections: 4,
  trials: 1,
  trialMs: 250,
  warmupMs: 100,
  seedPosts: 12,
  heraldEnv: {},
  log: () => {},
  ...overrides,
});

describe('pnpm bench HTTP section, smoke size', () => {
  it('runs every operation against raw, Herald (image and `pnpm start` node flags), stock Yoga and Herald on PGlite, every answer checked', async () => {
    const result = await runHttp(httpConfig({}));
    expect(result.skipped).toEqual([]);
    expect(result.rows.map((row) => `${row.operation}/${row.target}`).sort()).toEqual(
      ['posts', 'me', 'createPost', 'publishPost']
        .flatMap((operation) =>
          ['raw', 'herald', 'herald-start', 'yoga', 'herald-pglite'].map((target) => `${operation}/${target}`),
        )
        .sort(),
    );
    for (const row of result.rows) {
      expect({ row: `${row.operation}/${row.target}`, failures: row.failures, firstFailure: row.firstFailure }).toEqual(
        {
          row: `${row.operation}/${row.target}`,
          failures: 0,
          firstFailure: undefined,
        },
      );
      expect(row.trials[0]!.requests).toBeGreaterThan(0);
      expect(row.trials[0]!.exhausted).toBe(false);
      if (row.target !== 'raw') expect(row.vsRaw.reqPerSec).not.toBeNull();
    }
    // ~50 s alone; five servers' starts and loads, beside the rest of the suite on 2 cores, took over 180 s once.
  }, 300_000);

  it('counts an answer with the wrong content as failed', async () => {
    const result = await runHttp(httpConfig({ targets: ['raw'], operations: ['me'], rawFault: 'wrong-me' }));
    const row = result.rows.find((candidate) => candidate.target === 'raw')!;
    expect(row.failures).toBeGreaterThan(0);
    expect(row.firstFailure).toMatch(/wrong answer \(me\.id\)/);
  }, 120_000);
});

describe('pnpm bench embedded footprint, smoke', () => {
  it('starts pnpm start twice on a fresh data directory and reads time to ready and idle RSS', async () => {
    const result = await runFootprint();
    expect(result.error).toBeUndefined();
    expect(result.build?.ms).toBeGreaterThan(0);
    expect(result.starts.map((start) => start.start)).toEqual(['first (creates the database)', 'second (reopens it)']);
    for (const start of result.starts) {
      expect(start.readyMs).toBeGreaterThan(0);
      expect(start.idleRssMiB).toBeGreaterThan(0);
    }
  }, 300_000);
});

// One path per test, one after another: each path starts three or six Herald processes of its own, which
// alone takes most of a minute on a loaded 2-core machine; side by side they starved the other worker's tests.
describe('pnpm bench tracing scenario, smoke size', () => {
  it.each(['http', 'fanout', 'webhooks'] as const)(
    '%s: off / ratio 0.01 / ratio 1.0 measured, and the sink gets spans only when on',
    async (path) => {
      const result = await runTracing({
        databaseUrl: inject('databaseUrl'),
        redisUrl: inject('redisUrl'),
        paths: [path],
        repeats: 1,
        fanoutTrialsPerRound: 2,
        heraldEnv: {},
        http: { connections: 2, trialsPerRound: 2, trialMs: 250, warmupMs: 100 },
        fanout: { ...config, sockets: 10, workers: 1, fixedMs: 100, singleTrials: 1 },
        webhooks: { events: 20, warmUpEvents: 5, connections: 2, timeoutMs: 30_000 },
        log: () => {},
      });
      expect(result.skipped).toEqual([]);
      expect(result.rows.map((row) => `${row.path}/${row.setting}`)).toEqual(
        ['off', 'ratio-0.01', 'ratio-1'].map((id) => `${path}/${id}`),
      );
      for (const row of result.rows) {
        expect({ setting: row.setting, problems: row.problems }).toEqual({ setting: row.setting, problems: [] });
        expect(row.lowest?.cpu).toBeGreaterThan(0);
        expect(row.lowest?.rate).toBeGreaterThan(0);
        // Fan-out: every saturation trial of the round is kept (each is paired with off's turn beside it).
        if (path === 'fanout') expect(row.measurements).toHaveLength(2);
        // HTTP: the three side by side, every window read for each, beside off's figures of that window.
        if (path === 'http') {
          expect(row.measurements).toHaveLength(2);
          for (const one of row.measurements) expect(one.offCpu).toBeGreaterThan(0);
        }
        expect(row.median?.count).toBe(row.measurements.length);
        // Against off: a median of pairs, for every path.
        if (row.setting !== 'off') expect(row.vsOff.cpuPct).toEqual(expect.any(Number));
        // Off loads no SDK and exports nothing; with every trace sampled the path's processes export spans.
        if (row.setting === 'off') expect(row.exported).toEqual({ exports: 0, bytes: 0 });
        if (row.setting === 'ratio-1') expect(row.exported.bytes).toBeGreaterThan(0);
      }
      expect(result.sinkStrays).toBe(0);
      const table = tracingMarkdown(result)
        .split('\n')
        .filter((line) => /^\| (`posts|subscription|webhook)/.test(line));
      expect(table).toHaveLength(3);
      for (const line of table)
        expect(line).toMatch(
          /^\| [^|]+ \| [^|]+ \| \d+(\.\d+)? µs\/(request|delivery) \(median of \d+\) \|[^|]+\| [\d,]+ (req|deliveries)\/s \|/,
        );
    },
    // 90–160 s each on a 2-core machine loaded by the rest of the suite (12 Herald starts per path).
    360_000,
  );
});
