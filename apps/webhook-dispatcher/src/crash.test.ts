import { startTestReceiver } from '@herald/webhook-engine/testing';
import { describe, expect, it } from 'vitest';
import { dispatcherAppWorld } from './testing/dispatcher-app-world.js';
import { startDispatcherProcess } from './testing/dispatcher-process.js';

// The dispatcher app as operators run it (tsx src/main.ts), SIGKILLed in the middle of a batch of 250
// events and started again: every event reaches the receiver at least once, and a duplicate carries
// the same event id.

const EVENTS = 250;

// Slow enough (10 ms each, 10 at a time) that the kill lands mid-batch.
const world = dispatcherAppWorld(() => startTestReceiver(() => ({ status: 200, delayMs: 10 })));

describe('a dispatcher killed with SIGKILL mid-batch', () => {
  it('leaves nothing undelivered once it is started again', async () => {
    await world.harness.createEndpoint('org-crash', world.receiver.url('/crash'));
    const first = await startDispatcherProcess(world.harness);
    const events = await world.harness.publish('org-crash', EVENTS);

    await world.receiver.waitFor((requests) => requests.length >= 40, 30_000);
    first.kill('SIGKILL');
    await new Promise((resolve) => first.once('exit', resolve));
    const deliveredBeforeKill = world.receiver.requests.length;
    expect(deliveredBeforeKill).toBeLessThan(EVENTS);

    await startDispatcherProcess(world.harness);
    const received = () => new Set(world.receiver.requests.map((request) => request.headers['x-webhook-id']));
    await world.receiver.waitFor(() => received().size === EVENTS, 60_000);
    expect(received()).toEqual(new Set(events));
    // A duplicate is the same event again: the header and the body always name the same id.
    for (const request of world.receiver.requests) {
      expect(JSON.parse(request.body).id).toBe(request.headers['x-webhook-id']);
    }
    const duplicates = world.receiver.requests.length - EVENTS;
    expect(duplicates).toBeLessThanOrEqual(20);
  });
});
