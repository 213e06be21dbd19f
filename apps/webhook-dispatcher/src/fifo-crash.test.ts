import type { ChildProcess } from 'node:child_process';
import { startTestReceiver } from '@herald/webhook-engine/testing';
import { describe, expect, it } from 'vitest';
import { dispatcherAppWorld } from './testing/dispatcher-app-world.js';
import { startDispatcherProcess } from './testing/dispatcher-process.js';

// A FIFO endpoint's backlog, with the dispatcher app as operators run it (tsx src/main.ts) SIGKILLed
// in the middle of it and started again: every event reaches the receiver, and the first time the
// receiver sees each event is strictly in publish order (what comes again after the kill is an event
// already seen, in order too).

const EVENTS = 120;

// Slow enough (10 ms each, one at a time) that the kill lands mid-backlog.
const world = dispatcherAppWorld(() => startTestReceiver(() => ({ status: 200, delayMs: 10 })));

/** Stops a dispatcher so that the next test's crashing one is alone to take its work. */
async function stop(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

describe('a dispatcher killed with SIGKILL in the middle of a FIFO backlog', () => {
  it('delivers the rest after a restart, never an event before one published earlier', async () => {
    const { id } = await world.harness.createEndpoint('org-fifo-crash', world.receiver.url('/fifo-crash'));
    await world.harness.db.updateTable('webhook_endpoints').set({ ordering: 'FIFO' }).where('id', '=', id).execute();
    const first = await startDispatcherProcess(world.harness);
    const events = await world.harness.publish('org-fifo-crash', EVENTS);

    await world.receiver.waitFor((requests) => requests.length >= 30, 30_000);
    first.kill('SIGKILL');
    await new Promise((resolve) => first.once('exit', resolve));
    expect(world.receiver.requests.length).toBeLessThan(EVENTS);

    const fresh = await startDispatcherProcess(world.harness);
    const ids = () => world.receiver.requests.map((request) => request.headers['x-webhook-id']);
    await world.receiver.waitFor(() => new Set(ids()).size === EVENTS, 60_000);
    // First sightings in publish order: no event was ever sent before all those published before it.
    expect([...new Set(ids())]).toEqual(events);
    // Each request is either the next new event or one already sent: the highest seen never skips ahead.
    let highest = -1;
    for (const eventId of ids()) {
      const index = events.indexOf(eventId!);
      expect(index).toBeLessThanOrEqual(highest + 1);
      highest = Math.max(highest, index);
    }
    await stop(fresh);
  });
});

describe("a dispatcher SIGKILLed at each step of a FIFO endpoint's straight path", () => {
  it.each(['after-fan-out', 'after-claim', 'after-post'])(
    '%s: a fresh one delivers the line in order',
    async (step) => {
      const path = `/fifo-${step}`;
      const orgId = `org-fifo-${step}`;
      const { id } = await world.harness.createEndpoint(orgId, world.receiver.url(path));
      await world.harness.db.updateTable('webhook_endpoints').set({ ordering: 'FIFO' }).where('id', '=', id).execute();
      const crashing = await startDispatcherProcess(world.harness, { crashAt: step });
      const exited = new Promise((resolve) => crashing.once('exit', resolve));
      const events = await world.harness.publish(orgId, 10);
      await exited;
      expect(crashing.signalCode).toBe('SIGKILL');

      const fresh = await startDispatcherProcess(world.harness);
      const ids = () => world.receiver.requestsTo(path).map((request) => request.headers['x-webhook-id']);
      await world.receiver.waitFor(() => new Set(ids()).size === events.length, 60_000);
      expect([...new Set(ids())]).toEqual(events);
      let highest = -1;
      for (const eventId of ids()) {
        const index = events.indexOf(eventId!);
        expect(index).toBeLessThanOrEqual(highest + 1);
        highest = Math.max(highest, index);
      }
      await stop(fresh);
    },
  );
});
