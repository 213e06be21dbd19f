import { once } from 'node:events';
import { type AddressInfo, createServer } from 'node:net';
import { afterAll } from 'vitest';

// For tests that an app, failing to start, releases what it opened: counts of this process's open
// resources, and a port already taken.

/** Open TCP client sockets of this process (PostgreSQL pool, Redis connections). */
export function openSockets(): number {
  return process.getActiveResourcesInfo().filter((kind) => kind === 'TCPSocketWrap').length;
}

/** Pending timers and intervals of this process (pollers, lease renewals, sweeps). */
export function openTimers(): number {
  return process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
}

/** Closed sockets leave the list a few loop turns after their close: waits (bounded) until at most `expected`. */
export async function settledSockets(expected: number): Promise<number> {
  for (let turn = 0; turn < 200 && openSockets() > expected; turn++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return openSockets();
}

/**
 * Timers cleared by a close that is still finishing (a client's reconnect or idle timer) leave the list a
 * few loop turns later: waits (bounded, 2 s) until at most `expected`. The wait's own timer has fired
 * whenever the count is read.
 */
export async function settledTimers(expected: number): Promise<number> {
  for (let turn = 0; turn < 200 && openTimers() > expected; turn++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return openTimers();
}

/** Holds a port on 127.0.0.1 until the test file ends (its `afterAll`), for a listen that must fail. */
export async function holdPort(): Promise<number> {
  const taken = createServer();
  taken.listen(0, '127.0.0.1');
  await once(taken, 'listening');
  afterAll(() => new Promise<void>((resolve) => taken.close(() => resolve())));
  return (taken.address() as AddressInfo).port;
}
