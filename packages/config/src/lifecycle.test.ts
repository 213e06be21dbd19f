import { once } from 'node:events';
import { createServer, type Server } from 'node:net';
import { describe, expect, it } from 'vitest';
import { createLifecycle, type LifecyclePart, LifecycleStoppedError, notReady, READY } from './lifecycle.js';

/** A part that records what happened to it in `log`. */
function part(name: string, log: string[], overrides: Partial<LifecyclePart> = {}): LifecyclePart {
  return {
    name,
    start: () => {
      log.push(`start ${name}`);
    },
    stop: () => {
      log.push(`stop ${name}`);
    },
    readiness: () => READY,
    ...overrides,
  };
}

/** A part holding a real timer and a real listening socket, as a database pool or a poller would. */
function resourcefulPart(name: string): LifecyclePart & { server: Server } {
  let timer: NodeJS.Timeout | undefined;
  const server = createServer();
  return {
    name,
    server,
    async start() {
      timer = setInterval(() => {}, 60_000);
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
    },
    async stop() {
      clearInterval(timer);
      if (server.listening) await new Promise((resolve) => server.close(resolve));
    },
    readiness: () => READY,
  };
}

describe('createLifecycle', () => {
  it('starts parts in order and stops them in reverse', async () => {
    const log: string[] = [];
    const lifecycle = createLifecycle();
    lifecycle.add(part('a', log));
    lifecycle.add(part('b', log));
    lifecycle.add(part('c', log));
    await lifecycle.start();
    await lifecycle.stop();
    expect(log).toEqual(['start a', 'start b', 'start c', 'stop c', 'stop b', 'stop a']);
  });

  it('starts parts added after a start on the next call', async () => {
    const log: string[] = [];
    const lifecycle = createLifecycle();
    lifecycle.add(part('a', log));
    await lifecycle.start();
    lifecycle.add(part('b', log));
    lifecycle.add(part('c', log));
    expect(log).toEqual(['start a']);
    await lifecycle.start();
    expect(log).toEqual(['start a', 'start b', 'start c']);
  });

  it('a stop during a start releases the part that was starting once its start ends', async () => {
    const log: string[] = [];
    let finishStart!: () => void;
    const lifecycle = createLifecycle();
    lifecycle.add(part('a', log));
    lifecycle.add(
      part('slow', log, {
        start: () =>
          new Promise<void>((resolve) => {
            finishStart = () => {
              log.push('slow started');
              resolve();
            };
          }),
      }),
    );
    lifecycle.add(part('never', log, { start: () => void log.push('start never') }));
    const starting = lifecycle.start();
    await new Promise((resolve) => setImmediate(resolve));
    const stopped = lifecycle.stop();
    finishStart();
    await expect(starting).rejects.toBeInstanceOf(LifecycleStoppedError);
    await stopped;
    // `never` never starts; `slow` is stopped once more after its start ended.
    expect(log).toEqual(['start a', 'stop never', 'slow started', 'stop slow', 'stop a', 'stop slow']);
  });

  it('a part that throws at start leaves no timer or socket behind', async () => {
    const before = process.getActiveResourcesInfo().filter((kind) => kind !== 'TTYWrap');
    const log: string[] = [];
    const lifecycle = createLifecycle();
    const first = lifecycle.add(resourcefulPart('first'));
    const second = lifecycle.add(resourcefulPart('second'));
    lifecycle.add(
      part('broken', log, {
        start: () => {
          throw new Error('no such port');
        },
      }),
    );
    lifecycle.add(part('after', log));
    await expect(lifecycle.start()).rejects.toThrow('no such port');
    expect(first.server.listening).toBe(false);
    expect(second.server.listening).toBe(false);
    // The part that threw and the one after it are stopped too (they may hold what they opened).
    expect(log).toEqual(['stop after', 'stop broken']);
    // A closed server's handle is released by libuv a few loop turns after its close event.
    for (let turn = 0; turn < 50 && process.getActiveResourcesInfo().includes('TCPServerWrap'); turn++) {
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(process.getActiveResourcesInfo().filter((kind) => kind !== 'TTYWrap')).toEqual(before);
    await expect(lifecycle.start()).rejects.toBeInstanceOf(LifecycleStoppedError);
  });

  it('a stop that throws does not keep the parts before it open; the first error is rethrown', async () => {
    const log: string[] = [];
    const errors: string[] = [];
    const lifecycle = createLifecycle({ onStopError: (name) => errors.push(name) });
    lifecycle.add(part('a', log));
    lifecycle.add(
      part('b', log, {
        stop: () => {
          throw new Error('b would not stop');
        },
      }),
    );
    await lifecycle.start();
    await expect(lifecycle.stop()).rejects.toThrow('b would not stop');
    expect(log).toEqual(['start a', 'start b', 'stop a']);
    expect(errors).toEqual(['b']);
  });

  it('stop is idempotent: parts are stopped once', async () => {
    const log: string[] = [];
    const lifecycle = createLifecycle();
    lifecycle.add(part('a', log));
    await lifecycle.start();
    await Promise.all([lifecycle.stop(), lifecycle.stop()]);
    await lifecycle.stop();
    expect(log).toEqual(['start a', 'stop a']);
  });

  it('readiness names the first unready part, from the last added to the first', async () => {
    let redisUp = true;
    let draining = false;
    const lifecycle = createLifecycle();
    lifecycle.add(part('database', [], { readiness: async () => notReady('database unreachable') }));
    lifecycle.add(part('pubsub', [], { readiness: () => (redisUp ? READY : notReady('redis unreachable')) }));
    lifecycle.add(part('drain', [], { readiness: () => (draining ? notReady('draining') : READY) }));
    expect(await lifecycle.readiness()).toEqual({ ready: false, reason: 'database unreachable', part: 'database' });
    redisUp = false;
    expect(await lifecycle.readiness()).toEqual({ ready: false, reason: 'redis unreachable', part: 'pubsub' });
    draining = true;
    expect(await lifecycle.readiness()).toEqual({ ready: false, reason: 'draining', part: 'drain' });
    const healthy = createLifecycle();
    healthy.add(part('a', []));
    expect(await healthy.readiness()).toEqual({ ready: true });
  });
});
