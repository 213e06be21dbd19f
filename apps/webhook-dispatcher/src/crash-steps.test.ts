import { waitFor } from '@herald/testing/ports';
import { startTestReceiver } from '@herald/webhook-engine/testing';
import { describe, expect, it } from 'vitest';
import { dispatcherAppWorld } from './testing/dispatcher-app-world.js';
import { type DispatcherProcess, spawnDispatcherProcess } from './testing/dispatcher-process.js';

// The dispatcher app SIGKILLs itself (HERALD_TEST_CRASH_AT) at each step of the straight path; a
// fresh one delivers the event within the lease (WEBHOOK_TIMEOUT_MS × 1.5, at least +1 s) plus a
// few seconds.

const TIMEOUT_MS = 1_000;
/** The lease (2 s at a 1 s timeout) plus a generous margin for a machine under load. */
const RECOVERY_WAIT_MS = 20_000;

const world = dispatcherAppWorld(startTestReceiver);

/** The app with a 1 s attempt timeout; `crashAt` makes it SIGKILL itself at that step. */
function spawnDispatcher(crashAt?: string): DispatcherProcess {
  return spawnDispatcherProcess(world.harness, {
    crashAt,
    env: { WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS), WEBHOOK_POLL_INTERVAL_MS: '100' },
    readyTimeoutMs: 45_000,
  });
}

describe('a dispatcher SIGKILLed at each step of the straight path', () => {
  it.each([
    ['after-fan-out', 0],
    ['after-claim', 0],
    ['after-post', 1],
  ] as const)('%s: the delivery is made again within the lease', async (step, sentBeforeKill) => {
    const path = `/${step}`;
    const orgId = `org-${step}`;
    await world.harness.createEndpoint(orgId, world.receiver.url(path));
    const crashing = spawnDispatcher(step);
    await crashing.ready;
    const [eventId] = await world.harness.publish(orgId, 1);
    await crashing.exited;
    expect(crashing.child.signalCode).toBe('SIGKILL');
    const ids = () => world.receiver.requestsTo(path).map((request) => request.headers['x-webhook-id']);
    expect(ids()).toHaveLength(sentBeforeKill);

    const fresh = spawnDispatcher();
    await fresh.ready;
    await world.receiver.waitFor(() => ids().length === sentBeforeKill + 1, RECOVERY_WAIT_MS);
    expect(ids()).toEqual(Array(sentBeforeKill + 1).fill(eventId));
    const statusOf = async () =>
      (
        await world.harness.db
          .selectFrom('webhook_deliveries')
          .select('status')
          .where('event_id', '=', eventId!)
          .executeTakeFirstOrThrow()
      ).status;
    // The fresh process records the outcome after the receiver answered (later on a busy host).
    await waitFor('the outcome recorded', async () => (await statusOf()) === 'SUCCEEDED', {
      timeoutMs: 30_000,
      intervalMs: 50,
    }).catch(() => undefined); // past the wait, the assertion below shows the status as it is
    expect(await statusOf()).toBe('SUCCEEDED');
    fresh.child.kill('SIGTERM');
    await fresh.exited;
  });
});
