import { holdPort, openSockets, openTimers, settledSockets, settledTimers } from '@herald/testing';
import { describe, expect, inject, it } from 'vitest';
import { startTestApi } from './testing/test-api.js';

const takenPort = await holdPort();

describe('createApp lifecycle', () => {
  it('a port already taken fails listen and releases PostgreSQL, Redis and the timers', async () => {
    const baseline = openSockets();
    const timers = openTimers();
    const api = await startTestApi({
      databaseUrl: inject('databaseUrl'),
      env: { REDIS_URL: inject('redisUrl'), PORT: String(takenPort) },
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
    expect(await settledTimers(timers)).toBeLessThanOrEqual(timers);
    await expect(api.app.database.ping()).rejects.toThrow();
    expect(api.app.pubsub.readiness()).toEqual({ ready: false, reason: 'redis unreachable' });
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
