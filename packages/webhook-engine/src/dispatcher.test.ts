import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rotateWebhookSecret } from '@herald/db';
import { TEST_KEYRING } from '@herald/testing';
import { waitFor } from '@herald/testing/ports';
import { generateWebhookSecret, verifyWebhook } from '@herald/webhooks';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { listDeadLetters } from './dead-letters.js';
import { replayDeadLetters } from './lease-protocol.js';
import { createDispatcherHarness, type DispatcherHarness, type StartedDispatcher } from './testing/harness.js';
import { type ReceivedRequest, startTestReceiver, type TestReceiver } from './testing/test-receiver.js';

// Receiver faults, dead letters, tenancy and URL checks against one dispatcher on a real Redis stream,
// a real PostgreSQL schema and real HTTP receivers. Timings are milliseconds (FAST_SETTINGS): retries
// start at 30 ms and give up after 4 s.

let harness: DispatcherHarness;
let receiver: TestReceiver;
let dispatcher: StartedDispatcher;

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  receiver = await startTestReceiver();
  dispatcher = await harness.startDispatcher();
});

afterAll(async () => {
  await receiver?.close();
  await harness?.close();
});

async function deliveryOf(eventId: string) {
  return harness.db.selectFrom('webhook_deliveries').selectAll().where('event_id', '=', eventId).executeTakeFirst();
}

async function attemptsOf(eventId: string) {
  const delivery = await deliveryOf(eventId);
  if (!delivery) return [];
  return harness.db
    .selectFrom('webhook_attempt_log')
    .selectAll()
    .where('delivery_id', '=', delivery.id)
    .orderBy('id')
    .execute();
}

async function waitForStatus(eventId: string, status: string, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const delivery = await deliveryOf(eventId);
    if (delivery?.status === status) return delivery;
    if (Date.now() > deadline)
      throw new Error(`delivery of ${eventId} is ${delivery?.status ?? 'missing'}, not ${status}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

function bodyId(request: ReceivedRequest): string {
  return JSON.parse(request.body).id;
}

/** Registers an endpoint at a fresh path of the receiver in a fresh organisation and publishes one event. */
async function scenario(name: string, behave?: Parameters<TestReceiver['behave']>[0]) {
  const path = `/${name}`;
  if (behave) receiver.behave(behave, path);
  const orgId = `org-${name}`;
  const endpoint = await harness.createEndpoint(orgId, receiver.url(path));
  const [eventId] = await harness.publish(orgId);
  return { path, orgId, endpoint, eventId: eventId! };
}

describe('delivery', () => {
  it('signs each delivery in both documented schemes so the receiver library verifies it', async () => {
    const { path, endpoint, eventId } = await scenario('signed');
    await receiver.waitFor(() => receiver.requestsTo(path).length === 1);
    const [request] = receiver.requestsTo(path);
    expect(request!.headers['content-type']).toBe('application/json');
    expect(request!.headers['x-webhook-id']).toBe(eventId);
    expect(request!.headers['x-webhook-signature']).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
    const event = verifyWebhook({ rawBody: request!.body, headers: request!.headers, secrets: [endpoint.secret] });
    expect(event).toMatchObject({ id: eventId, type: 'post.published' });
    await waitForStatus(eventId, 'SUCCEEDED');
  });

  it('signs with both secrets during a rotation', async () => {
    const orgId = 'org-rotation';
    const endpoint = await harness.createEndpoint(orgId, receiver.url('/rotation'));
    const next = generateWebhookSecret();
    await rotateWebhookSecret(harness.db, {
      endpointId: endpoint.id,
      secret: next,
      graceMs: 60_000,
      keyring: TEST_KEYRING,
    });
    await harness.publish(orgId);
    await receiver.waitFor(() => receiver.requestsTo('/rotation').length === 1);
    const [request] = receiver.requestsTo('/rotation');
    expect(request!.headers['x-webhook-signature']).toMatch(/^t=\d+,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/);
    for (const secret of [endpoint.secret, next]) {
      expect(verifyWebhook({ rawBody: request!.body, headers: request!.headers, secrets: [secret] }).id).toBe(
        bodyId(request!),
      );
    }
  });

  it('retries 500 then 200 with the same event id, recording each attempt', async () => {
    const { path, eventId } = await scenario('500-then-200', (_request, nth) => ({ status: nth === 1 ? 500 : 200 }));
    await waitForStatus(eventId, 'SUCCEEDED');
    expect(receiver.requestsTo(path).map(bodyId)).toEqual([eventId, eventId]);
    expect(receiver.requestsTo(path).map((request) => request.headers['x-webhook-id'])).toEqual([eventId, eventId]);
    const attempts = await attemptsOf(eventId);
    expect(attempts.map((attempt) => [attempt.status_code, attempt.error])).toEqual([
      [500, 'HTTP 500'],
      [200, null],
    ]);
    expect(attempts.every((attempt) => attempt.duration_ms >= 0 && attempt.at instanceof Date)).toBe(true);
  });

  it('retries after a timeout', async () => {
    const { path, eventId } = await scenario('timeout', (_request, nth) => (nth === 1 ? 'hang' : { status: 204 }));
    await waitForStatus(eventId, 'SUCCEEDED');
    expect(receiver.requestsTo(path).map(bodyId)).toEqual([eventId, eventId]);
    const attempts = await attemptsOf(eventId);
    expect(attempts[0]).toMatchObject({ status_code: null, error: 'timed out after 1000 ms' });
    expect(attempts[1]).toMatchObject({ status_code: 204, error: null });
  });

  it('retries after the connection is refused, until the receiver is back', async () => {
    // A port nobody listens on, until the receiver below starts on it.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const { port } = probe.address() as AddressInfo;
    await new Promise((resolve) => probe.close(resolve));
    const orgId = 'org-refused';
    await harness.createEndpoint(orgId, `http://127.0.0.1:${port}/refused`);
    const [eventId] = await harness.publish(orgId);
    const deadline = Date.now() + 10_000;
    while ((await attemptsOf(eventId!)).length < 2 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    const late = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.end());
    });
    const bodies: string[] = [];
    late.on('request', (req) => req.headers['x-webhook-id'] && bodies.push(String(req.headers['x-webhook-id'])));
    await new Promise<void>((resolve) => late.listen(port, '127.0.0.1', resolve));
    try {
      await waitForStatus(eventId!, 'SUCCEEDED');
    } finally {
      late.closeAllConnections();
      await new Promise((resolve) => late.close(resolve));
    }
    const attempts = await attemptsOf(eventId!);
    expect(attempts.length).toBeGreaterThanOrEqual(3);
    expect(
      attempts
        .slice(0, -1)
        .every((attempt) => attempt.status_code === null && /ECONNREFUSED/.test(attempt.error ?? '')),
    ).toBe(true);
    expect(attempts.at(-1)).toMatchObject({ status_code: 200, error: null });
    expect(bodies).toEqual([eventId]);
  });

  it('never follows a redirect: a 301 is a failed attempt, retried at the same URL', async () => {
    const { path, eventId } = await scenario('redirect', (_request, nth) =>
      nth === 1 ? { status: 301, headers: { location: receiver.url('/redirect-target') } } : { status: 200 },
    );
    await waitForStatus(eventId, 'SUCCEEDED');
    expect(receiver.requestsTo(path)).toHaveLength(2);
    expect(receiver.requestsTo('/redirect-target')).toHaveLength(0);
    const attempts = await attemptsOf(eventId);
    expect(attempts[0]).toMatchObject({ status_code: 301, error: 'HTTP 301: redirects are not followed' });
  });

  it('waits as long as a 429 asks with Retry-After', async () => {
    const { path, eventId } = await scenario('throttled', (_request, nth) =>
      nth === 1 ? { status: 429, headers: { 'retry-after': '1' } } : { status: 200 },
    );
    await receiver.waitFor(() => receiver.requestsTo(path).length === 1);
    const scheduled = await waitForAttempts(eventId, 1);
    // The retry is scheduled at least a second out (the ordinary backoff would be ~30 ms).
    expect(scheduled.next_attempt_at!.getTime() - (await attemptsOf(eventId))[0]!.at.getTime()).toBeGreaterThanOrEqual(
      900,
    );
    await waitForStatus(eventId, 'SUCCEEDED');
    const [first, second] = receiver.requestsTo(path);
    expect(bodyId(second!)).toBe(bodyId(first!));
    expect((await attemptsOf(eventId)).map((attempt) => attempt.status_code)).toEqual([429, 200]);
  });

  it('gives up at the retry horizon: DEAD, dead-lettered, counted, and replayable', async () => {
    const { path, eventId } = await scenario('never-recovers', () => ({ status: 500 }));
    const dead = await waitForStatus(eventId, 'DEAD');
    expect(dead.next_attempt_at).toBeNull();
    const requests = receiver.requestsTo(path);
    expect(requests.length).toBeGreaterThanOrEqual(3);
    expect(new Set(requests.map(bodyId))).toEqual(new Set([eventId]));
    expect((await attemptsOf(eventId)).length).toBe(requests.length);

    const listed = async () => {
      const all = [];
      for await (const view of listDeadLetters(harness.db)) all.push(view);
      return all;
    };
    const letter = (await listed()).find((entry) => entry.letter.deliveryId === dead.id);
    expect(letter).toMatchObject({
      status: 'DEAD',
      letter: { eventId, lastStatusCode: 500, attempts: requests.length },
    });
    // Counted and streamed by the dispatcher once the record statement has answered it (and, for the
    // stream, after the durability barrier): a moment after the row reads DEAD.
    const deadLettersCounted = async () =>
      /^herald_webhook_dead_letters_total [1-9]/m.test(await dispatcher.metrics.registry.metrics());
    await waitFor('the dead letter to be counted', deadLettersCounted, { timeoutMs: 10_000 });
    expect(await dispatcher.metrics.registry.metrics()).toMatch(
      /^herald_webhook_attempts_total\{outcome="failure"\} [1-9]/m,
    );

    receiver.behave(() => ({ status: 200 }), path);
    // The dead-letter stream (the alerting feed) got it too.
    const streamed = async () =>
      (await harness.redis.xrange(harness.keys.deadLetterStream, '-', '+')).some(([, fields]) =>
        fields.includes(dead.id),
      );
    await waitFor('the dead letter on the stream', streamed, { timeoutMs: 10_000 });
    const replayed: string[] = [];
    const onPage = (ids: string[]) => {
      replayed.push(...ids);
    };
    expect(await replayDeadLetters(harness.db, { ids: [dead.id] }, { onPage })).toBe(1);
    expect(replayed).toEqual([dead.id]);
    await waitForStatus(eventId, 'SUCCEEDED');
    expect(bodyId(receiver.requestsTo(path).at(-1)!)).toBe(eventId);
    expect((await listed()).map((entry) => entry.letter.deliveryId)).not.toContain(dead.id);
  });
});

async function waitForAttempts(eventId: string, count: number) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const delivery = await deliveryOf(eventId);
    if (delivery && delivery.attempt_count >= count) return delivery;
    if (Date.now() > deadline) throw new Error(`no ${count} attempts of ${eventId}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('tenancy and URL checks at delivery', () => {
  it("delivers an organisation's events only to that organisation's endpoints", async () => {
    await harness.createEndpoint('org-tenant-a', receiver.url('/tenant-a'));
    await harness.createEndpoint('org-tenant-b', receiver.url('/tenant-b'));
    const [eventId] = await harness.publish('org-tenant-a');
    await waitForStatus(eventId!, 'SUCCEEDED');
    expect(receiver.requestsTo('/tenant-a').map(bodyId)).toEqual([eventId]);
    expect(receiver.requestsTo('/tenant-b')).toEqual([]);
  });

  it('refuses, at delivery, a metadata address and (when not allowed) private ones, even if stored', async () => {
    // Its own schema and stream: the dispatcher above allows private addresses.
    const own = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
    await own.startDispatcher({ allowPrivateUrls: false, retryHorizonMs: 300 });
    const deliveryIn = (eventId: string) =>
      own.db.selectFrom('webhook_deliveries').selectAll().where('event_id', '=', eventId).executeTakeFirst();
    try {
      const cases = [
        ['org-url-metadata', 'http://169.254.169.254/latest/meta-data/', /link-local/],
        ['org-url-loopback', receiver.url('/strict-loopback'), /loopback.*WEBHOOK_ALLOW_PRIVATE_URLS/],
        // A host name goes through the guarded DNS lookup of the connection itself.
        [
          'org-url-hostname',
          receiver.url('/strict-hostname').replace('127.0.0.1', 'localhost'),
          /host localhost resolves to .*loopback/,
        ],
      ] as const;
      const events: string[] = [];
      for (const [orgId, url] of cases) {
        // Written straight to the database, as if registered before the rules changed.
        await own.createEndpoint(orgId, url);
        events.push((await own.publish(orgId))[0]!);
      }
      for (const [index, [, , reason]] of cases.entries()) {
        const deadline = Date.now() + 20_000;
        let delivery = await deliveryIn(events[index]!);
        while (delivery?.status !== 'DEAD' && Date.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 25));
          delivery = await deliveryIn(events[index]!);
        }
        expect(delivery?.status).toBe('DEAD');
        const attempts = await own.db
          .selectFrom('webhook_attempt_log')
          .selectAll()
          .where('delivery_id', '=', delivery!.id)
          .execute();
        expect(attempts.length).toBeGreaterThanOrEqual(1);
        for (const attempt of attempts) {
          expect(attempt.status_code).toBeNull();
          expect(attempt.error).toMatch(/^refused: /);
          expect(attempt.error).toMatch(reason);
        }
      }
      expect(receiver.requestsTo('/strict-loopback')).toEqual([]);
      expect(receiver.requestsTo('/strict-hostname')).toEqual([]);
    } finally {
      await own.close();
    }
  });
});
