import { afterAll, describe, expect, inject, it } from 'vitest';
import { cleanupAll } from './src/common.js';
import { type FanoutConfig, type FanoutResult, runFanout } from './src/fanout.js';
import { PEERS } from './src/protocol.js';
import { startHeraldTarget, startPeerTarget, startRawTarget, type Target } from './src/targets.js';
import { runTokenVerify, tokenVerifyMarkdown } from './src/token-verify.js';

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
