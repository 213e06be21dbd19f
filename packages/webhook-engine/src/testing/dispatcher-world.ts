import { afterAll, afterEach, beforeAll, beforeEach, inject } from 'vitest';
import { createDispatcherHarness, type DispatcherHarness } from './harness.js';

/** A dispatcher harness and a receiver, set once the hooks of `dispatcherWorld` have run. */
export interface DispatcherWorld<Receiver> {
  readonly harness: DispatcherHarness;
  readonly receiver: Receiver;
}

/**
 * Registers the hooks that give the tests around them (a file, or a `describe` block) a dispatcher harness
 * on the run's PostgreSQL and Redis and a receiver from `startReceiver`: one for all of them, or with
 * `{ each: true }` a fresh pair for every test. After, the receiver closes first (cutting attempts that
 * hang on it, so the dispatchers stop at once), then the harness. Read `harness` and `receiver` inside
 * tests and hooks, not when the file loads.
 */
export function dispatcherWorld<Receiver extends { close(): Promise<void> }>(
  startReceiver: () => Promise<Receiver>,
  options: { each?: boolean } = {},
): DispatcherWorld<Receiver> {
  let harness: DispatcherHarness | undefined;
  let receiver: Receiver | undefined;
  const [before, after] = options.each ? [beforeEach, afterEach] : [beforeAll, afterAll];

  before(async () => {
    harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
    receiver = await startReceiver();
  });

  after(async () => {
    await receiver?.close();
    await harness?.close();
    harness = undefined;
    receiver = undefined;
  });

  return {
    get harness() {
      if (!harness) throw new Error('dispatcherWorld: the harness is read before its beforeAll/beforeEach ran');
      return harness;
    },
    get receiver() {
      if (!receiver) throw new Error('dispatcherWorld: the receiver is read before its beforeAll/beforeEach ran');
      return receiver;
    },
  };
}
