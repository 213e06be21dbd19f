import {
  createDispatcherHarness,
  type DispatcherHarness,
  startTestReceiver,
  type TestReceiver,
} from '@herald/webhook-engine/testing';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { killDispatcherProcesses, startDispatcherProcess } from './testing/dispatcher-process.js';

// The dispatcher app as operators run it (tsx src/main.ts), SIGKILLed in the middle of a batch of 250
// events and started again: every event reaches the receiver at least once, and a duplicate carries
// the same event id.

const EVENTS = 250;

let harness: DispatcherHarness;
let receiver: TestReceiver;

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  // Slow enough (10 ms each, 10 at a time) that the kill lands mid-batch.
  receiver = await startTestReceiver(() => ({ status: 200, delayMs: 10 }));
});

afterAll(async () => {
  killDispatcherProcesses();
  await receiver?.close();
  await harness?.close();
});

describe('a dispatcher killed with SIGKILL mid-batch', () => {
  it('leaves nothing undelivered once it is started again', async () => {
    await harness.createEndpoint('org-crash', receiver.url('/crash'));
    const first = await startDispatcherProcess(harness);
    const events = await harness.publish('org-crash', EVENTS);

    await receiver.waitFor((requests) => requests.length >= 40, 30_000);
    first.kill('SIGKILL');
    await new Promise((resolve) => first.once('exit', resolve));
    const deliveredBeforeKill = receiver.requests.length;
    expect(deliveredBeforeKill).toBeLessThan(EVENTS);

    await startDispatcherProcess(harness);
    const received = () => new Set(receiver.requests.map((request) => request.headers['x-webhook-id']));
    await receiver.waitFor(() => received().size === EVENTS, 60_000);
    expect(received()).toEqual(new Set(events));
    // A duplicate is the same event again: the header and the body always name the same id.
    for (const request of receiver.requests) {
      expect(JSON.parse(request.body).id).toBe(request.headers['x-webhook-id']);
    }
    const duplicates = receiver.requests.length - EVENTS;
    expect(duplicates).toBeLessThanOrEqual(20);
  });
});
