import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createDispatcherHarness, type DispatcherHarness } from './testing/harness.js';
import { startTestReceiver, type TestReceiver } from './testing/test-receiver.js';

// Several dispatchers sharing one stream, and receivers that are slow.

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

const ids = (path: string) => new Set(receiver.requestsTo(path).map((request) => request.headers['x-webhook-id']));

describe('two dispatchers on one stream', () => {
  it('make every delivery, lose none, and share the work', async () => {
    const first = await harness.startDispatcher();
    const second = await harness.startDispatcher();
    receiver.behave(() => ({ status: 200, delayMs: 5 }), '/two-a');
    receiver.behave(() => ({ status: 200, delayMs: 5 }), '/two-b');
    await harness.createEndpoint('org-two', receiver.url('/two-a'));
    await harness.createEndpoint('org-two', receiver.url('/two-b'));
    const events = await harness.publish('org-two', 150);

    await receiver.waitFor(() => ids('/two-a').size === events.length && ids('/two-b').size === events.length, 30_000);
    expect(ids('/two-a')).toEqual(new Set(events));
    expect(ids('/two-b')).toEqual(new Set(events));
    const deliveries = await harness.db
      .selectFrom('webhook_deliveries')
      .select(['status'])
      .where('org_id', '=', 'org-two')
      .execute();
    expect(deliveries).toHaveLength(2 * events.length);
    // Unique per (event, endpoint): both dispatchers relaying and fanning out never doubled a delivery.
    for (let i = 0; i < 200 && !(await allSucceeded('org-two')); i++) await new Promise((r) => setTimeout(r, 25));
    expect(await allSucceeded('org-two')).toBe(true);

    const attempts = async (dispatcher: typeof first) =>
      Number(
        (await dispatcher.metrics.attempts.get()).values.find((value) => value.labels.outcome === 'success')?.value,
      );
    expect((await attempts(first)) + (await attempts(second))).toBeGreaterThanOrEqual(2 * events.length);
    expect(await attempts(first)).toBeGreaterThan(0);
    expect(await attempts(second)).toBeGreaterThan(0);
    await Promise.all([first.stop(), second.stop()]);
  });
});

async function allSucceeded(orgId: string): Promise<boolean> {
  const pending = await harness.db
    .selectFrom('webhook_deliveries')
    .select('id')
    .where('org_id', '=', orgId)
    .where('status', '!=', 'SUCCEEDED')
    .execute();
  return pending.length === 0;
}

describe('a slow receiver', () => {
  it('never delays the others: its backlog waits behind its own concurrency cap', async () => {
    // Attempts to /slow hang until the 5 s timeout; 4 may be in flight at once.
    const dispatcher = await harness.startDispatcher({ timeoutMs: 5_000, endpointConcurrency: 4 });
    receiver.behave(() => 'hang', '/slow');
    await harness.createEndpoint('org-slow', receiver.url('/slow'));
    await harness.createEndpoint('org-slow', receiver.url('/fast'));
    const events = await harness.publish('org-slow', 30);

    await receiver.waitFor(() => ids('/fast').size === events.length, 20_000);
    // Every fast delivery arrived while the slow receiver still held its first four attempts.
    expect(receiver.requestsTo('/slow').length).toBeLessThanOrEqual(4);
    const slowPending = await harness.db
      .selectFrom('webhook_deliveries as delivery')
      .innerJoin('webhook_endpoints as endpoint', 'endpoint.id', 'delivery.endpoint_id')
      .select(['delivery.attempt_count', 'delivery.status'])
      .where('endpoint.url', '=', receiver.url('/slow'))
      .execute();
    expect(slowPending).toHaveLength(events.length);
    expect(slowPending.every((delivery) => delivery.status === 'PENDING' && delivery.attempt_count === 0)).toBe(true);
    // Closing the receiver cuts the hanging attempts, so the dispatcher stops at once.
    await receiver.close();
    await dispatcher.stop();
  });
});
