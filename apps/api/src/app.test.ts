import { once } from 'node:events';
import { type AddressInfo, createServer } from 'node:net';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { startTestApi } from './testing/test-api.js';

/** Open TCP client sockets of this process (PostgreSQL pool, Redis connections). */
function openSockets(): number {
  return process.getActiveResourcesInfo().filter((kind) => kind === 'TCPSocketWrap').length;
}

/** Pending timers and intervals of this process (pollers, lease renewals, sweeps). */
function openTimers(): number {
  return process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
}

/** Closed sockets leave the list a few loop turns after their close; bounded. */
async function settledSockets(expected: number): Promise<number> {
  for (let turn = 0; turn < 200 && openSockets() > expected; turn++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return openSockets();
}

const taken = createServer();
taken.listen(0, '127.0.0.1');
await once(taken, 'listening');
afterAll(() => new Promise<void>((resolve) => taken.close(() => resolve())));

describe('createApp lifecycle', () => {
  it('a port already taken fails listen and releases PostgreSQL, Redis and the timers', async () => {
    const baseline = openSockets();
    const timers = openTimers();
    const api = await startTestApi({
      databaseUrl: inject('databaseUrl'),
      env: { REDIS_URL: inject('redisUrl'), PORT: String((taken.address() as AddressInfo).port) },
    });
    expect(api.app.lifecycle.names).toEqual([
      'database',
      'webhook-secrets',
      'pubsub',
      'quotas',
      'http',
      'socket-rebalancer',
      'drain',
    ]);
    // PostgreSQL and Redis are connected before listen.
    expect(await api.app.lifecycle.readiness()).toEqual({ ready: true });
    expect(openSockets()).toBeGreaterThan(baseline);

    await expect(api.app.listen()).rejects.toMatchObject({ code: 'EADDRINUSE' });

    expect(await settledSockets(baseline)).toBeLessThanOrEqual(baseline);
    expect(openTimers()).toBeLessThanOrEqual(timers);
    await expect(api.app.database.ping()).rejects.toThrow();
    expect(api.app.pubsub.readiness).toBe(false);
    expect(api.app.httpServer.listening).toBe(false);
    // The stop already ran: a second one (the test's close) is the same promise, not a second shutdown.
    await api.close();
  });

  it('/readiness answers from the lifecycle, naming the part that is not ready', async () => {
    const api = await startTestApi({ databaseUrl: inject('databaseUrl') });
    try {
      expect(await api.app.lifecycle.readiness()).toEqual({ ready: true });
      api.app.drain();
      expect(await api.app.lifecycle.readiness()).toEqual({ ready: false, reason: 'draining', part: 'drain' });
      const response = await api.fetch('/readiness');
      expect(response.status).toBe(503);
      expect(await response.json()).toEqual({ ready: false, reason: 'draining' });
    } finally {
      await api.close();
    }
  });

  it('takes both fast paths that reach into dependencies: /metrics shows no fallback', async () => {
    const api = await startTestApi();
    try {
      const metrics = await (await api.fetch('/metrics')).text();
      expect(metrics).toContain('herald_fast_path_fallback{path="ws_frames"} 0');
      expect(metrics).toContain('herald_fast_path_fallback{path="pglite_statements"} 0');
    } finally {
      await api.close();
    }
  });
});
