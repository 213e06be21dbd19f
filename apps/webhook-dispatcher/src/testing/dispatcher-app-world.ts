import { type DispatcherWorld, dispatcherWorld } from '@herald/webhook-engine/testing';
import { afterAll } from 'vitest';
import { killDispatcherProcesses } from './dispatcher-process.js';

/**
 * The set-up of a test file that runs the app in child processes: a dispatcher harness and a receiver
 * (`dispatcherWorld`), and after the file a SIGKILL for every dispatcher process still running. Vitest runs
 * `afterAll` hooks last registered first, so the processes are gone before the receiver and the harness close.
 */
export function dispatcherAppWorld<Receiver extends { close(): Promise<void> }>(
  startReceiver: () => Promise<Receiver>,
): DispatcherWorld<Receiver> {
  const world = dispatcherWorld(startReceiver);
  afterAll(() => killDispatcherProcesses());
  return world;
}
