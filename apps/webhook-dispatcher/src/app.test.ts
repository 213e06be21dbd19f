import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { type AddressInfo, createServer } from 'node:net';
import { createTestSchema, TEST_ENCRYPTION_KEYS } from '@herald/testing';
import { pino } from 'pino';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { startDispatcherApp } from './app.js';
import { loadDispatcherConfig } from './env.js';

const openSockets = () => process.getActiveResourcesInfo().filter((kind) => kind === 'TCPSocketWrap').length;
const openTimers = () => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;

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
    } finally {
      await app.stop();
    }
    expect(await app.lifecycle.readiness()).toMatchObject({ ready: false, part: 'dispatcher' });
  });

  it('a port already taken fails the start and closes PostgreSQL, Redis and the timers', async () => {
    const config = await configWithPort((taken.address() as AddressInfo).port);
    const sockets = openSockets();
    const timers = openTimers();
    const fatal: string[] = [];
    const logger = pino({ level: 'fatal' }, { write: (line: string) => fatal.push(JSON.parse(line).msg) });
    await expect(startDispatcherApp(config, logger)).rejects.toMatchObject({ code: 'EADDRINUSE' });
    expect(fatal).toEqual([`cannot listen on 127.0.0.1:${config.http.port}`]);
    expect(await settledSockets(sockets)).toBeLessThanOrEqual(sockets);
    expect(openTimers()).toBeLessThanOrEqual(timers);
  });
});
