import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createDispatcherHarness, type DispatcherHarness } from './testing/harness.js';
import { startTestReceiver, type TestReceiver } from './testing/test-receiver.js';

// The dispatcher's lanes take their statements in turns (statement-turns.ts), on a real PostgreSQL
// schema and Redis stream: with two turns, one organisation's eight endpoints have one
// statement on its way at a time, the others wait for their turn and are counted, and every delivery
// still arrives.

let harness: DispatcherHarness;
let receiver: TestReceiver;

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  receiver = await startTestReceiver();
});

afterAll(async () => {
  await receiver?.close();
  await harness?.close();
});

describe('a dispatcher on a pool of two connections', () => {
  it("takes one organisation's lane statements in turns on a small pool: the waits are counted, every delivery arrives", async () => {
    const dispatcher = await harness.startDispatcher({ databaseConnections: 2 });
    const orgId = 'org-turns';
    const paths = Array.from({ length: 8 }, (_, i) => `/turns-${i}`);
    for (const path of paths) await harness.createEndpoint(orgId, receiver.url(path));
    const events = await harness.publish(orgId, 5);

    await receiver.waitFor(() => paths.every((path) => receiver.requestsTo(path).length >= events.length));
    for (const path of paths) {
      const ids = new Set(receiver.requestsTo(path).map((request) => JSON.parse(request.body).id as string));
      expect([...ids].sort()).toEqual([...events].sort());
    }
    const metrics = await dispatcher.metrics.registry.metrics();
    const waits = Number(/^herald_webhook_statement_turn_waits_total (\d+)/m.exec(metrics)?.[1]);
    // Eight lanes claiming, POSTing and recording at once, one statement on its way at a time: some
    // waited (without the turns none would be counted).
    expect(waits).toBeGreaterThanOrEqual(1);
  });
});
