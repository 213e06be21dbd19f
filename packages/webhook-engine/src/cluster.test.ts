import { waitFor } from '@herald/testing/ports';
import { describe, expect, it } from 'vitest';
import { dispatcherWorld } from './testing/dispatcher-world.js';
import { startTestReceiver } from './testing/test-receiver.js';

// Several dispatchers sharing one stream, and receivers that are slow.

const world = dispatcherWorld(startTestReceiver);

const ids = (path: string) =>
  new Set(world.receiver.requestsTo(path).map((request) => request.headers['x-webhook-id']));

describe('two dispatchers on one stream', () => {
  it('make every delivery, lose none, and share the work', async () => {
    const first = await world.harness.startDispatcher();
    const second = await world.harness.startDispatcher();
    world.receiver.behave(() => ({ status: 200, delayMs: 5 }), '/two-a');
    world.receiver.behave(() => ({ status: 200, delayMs: 5 }), '/two-b');
    await world.harness.createEndpoint('org-two', world.receiver.url('/two-a'));
    await world.harness.createEndpoint('org-two', world.receiver.url('/two-b'));
    const events = await world.harness.publish('org-two', 150);

    await world.receiver.waitFor(
      () => ids('/two-a').size === events.length && ids('/two-b').size === events.length,
      30_000,
    );
    expect(ids('/two-a')).toEqual(new Set(events));
    expect(ids('/two-b')).toEqual(new Set(events));
    const deliveries = await world.harness.db
      .selectFrom('webhook_deliveries')
      .select(['status'])
      .where('org_id', '=', 'org-two')
      .execute();
    expect(deliveries).toHaveLength(2 * events.length);
    // Unique per (event, endpoint): both dispatchers relaying and fanning out never doubled a delivery.
    // Every POST was answered; the last outcomes are recorded a moment later (later on a busy host).
    await waitFor('the last outcomes recorded', () => allSucceeded('org-two'), {
      timeoutMs: 30_000,
      intervalMs: 25,
    }).catch(() => undefined); // past the wait, the assertion below fails
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
  const pending = await world.harness.db
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
    const dispatcher = await world.harness.startDispatcher({ timeoutMs: 5_000, endpointConcurrency: 4 });
    world.receiver.behave(() => 'hang', '/slow');
    await world.harness.createEndpoint('org-slow', world.receiver.url('/slow'));
    await world.harness.createEndpoint('org-slow', world.receiver.url('/fast'));
    const events = await world.harness.publish('org-slow', 30);

    await world.receiver.waitFor(() => ids('/fast').size === events.length, 20_000);
    // Every fast delivery arrived while the slow receiver still held its first four attempts.
    expect(world.receiver.requestsTo('/slow').length).toBeLessThanOrEqual(4);
    const slowPending = await world.harness.db
      .selectFrom('webhook_deliveries as delivery')
      .innerJoin('webhook_endpoints as endpoint', 'endpoint.id', 'delivery.endpoint_id')
      .select(['delivery.attempt_count', 'delivery.status'])
      .where('endpoint.url', '=', world.receiver.url('/slow'))
      .execute();
    expect(slowPending).toHaveLength(events.length);
    expect(slowPending.every((delivery) => delivery.status === 'PENDING' && delivery.attempt_count === 0)).toBe(true);
    // Closing the receiver cuts the hanging attempts, so the dispatcher stops at once.
    await world.receiver.close();
    await dispatcher.stop();
  });
});
