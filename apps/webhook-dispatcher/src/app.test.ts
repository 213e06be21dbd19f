import { randomUUID } from 'node:crypto';
import {
  createTestSchema,
  holdPort,
  openSockets,
  openTimers,
  settledSockets,
  settledTimers,
  TEST_ENCRYPTION_KEYS,
} from '@herald/testing';
import { pino } from 'pino';
import { describe, expect, inject, it } from 'vitest';
import { startDispatcherApp } from './app.js';
import { loadDispatcherConfig } from './env.js';

const takenPort = await holdPort();

async function configWithPort(port: number) {
  const schema = await createTestSchema(inject('databaseUrl'));
  return loadDispatcherConfig({
    DATABASE_URL: schema.url,
    REDIS_URL: inject('redisUrl'),
    HERALD_REDIS_PREFIX: `herald-dispatcher-app-test:${randomUUID()}:`,
    HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
    HOST: '127.0.0.1',
    PORT: String(port),
  });
}

describe('startDispatcherApp', () => {
  it('starts its parts in order and answers readiness from them', async () => {
    const app = await startDispatcherApp(await configWithPort(0), pino({ level: 'silent' }));
    try {
      expect(app.lifecycle.names).toEqual([
        'database',
        'queue',
        'throttles-redis',
        'dispatcher',
        'outbox-wake',
        'ops-http',
      ]);
      const response = await fetch(`http://127.0.0.1:${app.address.port}/readiness`);
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ status: 'ready' });
      // The process's memory and heap, next to the webhook metrics.
      const metrics = await (await fetch(`http://127.0.0.1:${app.address.port}/metrics`)).text();
      expect(metrics).toMatch(/^herald_dispatcher_process_resident_memory_bytes \d+/m);
      expect(metrics).toMatch(/^herald_dispatcher_nodejs_heap_size_used_bytes \d+/m);
      expect(metrics).toMatch(/^herald_dispatcher_heap_live_after_gc_bytes \d+/m);
      expect(metrics).toContain('# TYPE herald_webhook_attempts_total counter');
    } finally {
      await app.stop();
    }
    expect(await app.lifecycle.readiness()).toMatchObject({ ready: false, part: 'dispatcher' });
  });

  it('a port already taken fails the start and closes PostgreSQL, Redis and the timers', async () => {
    const config = await configWithPort(takenPort);
    const sockets = openSockets();
    const timers = openTimers();
    const fatal: string[] = [];
    const logger = pino({ level: 'fatal' }, { write: (line: string) => fatal.push(JSON.parse(line).msg) });
    await expect(startDispatcherApp(config, logger)).rejects.toMatchObject({ code: 'EADDRINUSE' });
    expect(fatal).toEqual([`cannot listen on 127.0.0.1:${config.http.port}`]);
    expect(await settledSockets(sockets)).toBeLessThanOrEqual(sockets);
    expect(await settledTimers(timers)).toBeLessThanOrEqual(timers);
  });

  it('a part that fails while it is made, between two starts, is logged once and leaves nothing open', async () => {
    const config = await configWithPort(0);
    const sockets = openSockets();
    const timers = openTimers();
    const fatal: string[] = [];
    const logger = pino({ level: 'fatal' }, { write: (line: string) => fatal.push(JSON.parse(line).msg) });
    const broken = new Error('the throttles client could not be made');
    // By then the database has started (its pool and the migration's connections) and both Redis clients exist.
    const onPartAdded = (name: string) => {
      if (name === 'throttles-redis') throw broken;
    };
    await expect(startDispatcherApp(config, logger, { onPartAdded })).rejects.toBe(broken);
    expect(fatal).toEqual(['webhook dispatcher could not start']);
    expect(await settledSockets(sockets)).toBeLessThanOrEqual(sockets);
    expect(await settledTimers(timers)).toBeLessThanOrEqual(timers);
  });

  it('names the dispatcher part and its reason in readiness once stopped', async () => {
    const app = await startDispatcherApp(await configWithPort(0), pino({ level: 'silent' }));
    try {
      const dispatcher = app.lifecycle.names.indexOf('dispatcher');
      expect(dispatcher).toBeGreaterThan(0);
      expect(await app.lifecycle.readiness()).toEqual({ ready: true });
    } finally {
      await app.stop();
    }
    expect(await app.lifecycle.readiness()).toEqual({ ready: false, part: 'dispatcher', reason: 'stopped' });
  });
});
