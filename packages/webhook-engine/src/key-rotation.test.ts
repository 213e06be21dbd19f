import { countNotUnderFirstKey, listActiveWebhookSecrets, resealWebhookSecrets, rotateWebhookSecret } from '@herald/db';
import { TEST_KEYRING } from '@herald/testing';
import { waitFor } from '@herald/testing/ports';
import { generateWebhookSecret, verifyWebhook } from '@herald/webhooks';
import { describe, expect, it } from 'vitest';
import { dispatcherWorld } from './testing/dispatcher-world.js';
import { startTestReceiver } from './testing/test-receiver.js';

// `pnpm secrets rotate-key` while deliveries flow: the operator has deployed a keyring with a new
// first key (the old one after it) to every process, then re-encrypts. Every delivery still arrives
// signed with its endpoint's secret, a user's rotation made meanwhile is kept, and every row ends
// under the new key: a dispatcher deployed afterwards with the old key retired signs for every endpoint.

const ENDPOINTS = 16;
const EVENTS = 12;
const NEW_KEY = { id: 'k-new', key: Buffer.alloc(32, 0x4e) };
const DEPLOYED = [NEW_KEY, ...TEST_KEYRING] as const;

const world = dispatcherWorld(startTestReceiver);

describe('re-encrypting the signing secrets under a new key', () => {
  it('loses no delivery, keeps a concurrent rotation, and leaves every row under the new key', async () => {
    const orgId = 'org-key-rotation';
    const endpoints: Array<{ id: string; secret: string }> = [];
    for (let i = 0; i < ENDPOINTS; i++)
      endpoints.push(await world.harness.createEndpoint(orgId, world.receiver.url(`/keys/${i}`)));
    // A generous attempt timeout: on a busy machine a 1 s one sends events again (at least once), which is noise here.
    const dispatcher = await world.harness.startDispatcher({ timeoutMs: 10_000 }, DEPLOYED);

    const rotated = generateWebhookSecret();
    const publishing = (async () => {
      for (let i = 0; i < EVENTS; i++) {
        await world.harness.publish(orgId);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    // Deliveries are flowing (and the dispatcher holds the old envelopes opened) before the re-encryption starts.
    await world.receiver.waitFor(() => world.receiver.requestsTo('/keys/0').length >= 1);
    // Two rotate-key runs racing each other and a user rotating one endpoint's secret, while events flow.
    const [first, second] = await Promise.all([
      resealWebhookSecrets(world.harness.db, DEPLOYED, { batchSize: 3 }),
      resealWebhookSecrets(world.harness.db, DEPLOYED, { batchSize: 2 }),
      rotateWebhookSecret(world.harness.db, {
        endpointId: endpoints[0]!.id,
        secret: rotated,
        graceMs: 60_000,
        keyring: DEPLOYED,
      }),
    ]);
    await publishing;

    // Each row moved once: a run whose conditional update lost to the other does not count it.
    expect((first?.resealed ?? 0) + (second?.resealed ?? 0)).toBe(ENDPOINTS);
    expect([first?.remaining, second?.remaining]).toEqual([0, 0]);
    expect(await countNotUnderFirstKey(world.harness.db, [NEW_KEY])).toBe(0);
    expect(await listActiveWebhookSecrets(world.harness.db, endpoints[0]!.id, [NEW_KEY])).toEqual([
      rotated,
      endpoints[0]!.secret,
    ]);

    // At least once: a retry after a timeout may bring an event twice, so events are counted, not requests.
    const eventsAt = (i: number) =>
      new Set(world.receiver.requestsTo(`/keys/${i}`).map((request) => JSON.parse(request.body).id));
    await world.receiver.waitFor(() => endpoints.every((_, i) => eventsAt(i).size >= EVENTS), 60_000);
    for (const [i, endpoint] of endpoints.entries()) {
      const requests = world.receiver.requestsTo(`/keys/${i}`);
      expect(eventsAt(i).size, `events received by endpoint ${i}`).toBe(EVENTS);
      for (const request of requests) {
        expect(
          verifyWebhook({ rawBody: request.body, headers: request.headers, secrets: [endpoint.secret] }),
        ).toBeTruthy();
      }
    }
    // Recorded after the answer: wait for the records, then none is left undelivered.
    await waitFor('every delivery to be recorded SUCCEEDED', async () => {
      const unsettled = await world.harness.db
        .selectFrom('webhook_deliveries')
        .select('id')
        .where('status', '!=', 'SUCCEEDED')
        .execute();
      return unsettled.length === 0;
    });
    await dispatcher.stop();

    // The last step of the procedure: the old key leaves the keyring. A dispatcher started with the new
    // key alone opens every endpoint's secrets (the rotated endpoint's new and still-valid old one).
    const retired = await world.harness.startDispatcher({ timeoutMs: 10_000 }, [NEW_KEY]);
    const [lastEvent] = await world.harness.publish(orgId);
    const lastRequest = (i: number) =>
      world.receiver.requestsTo(`/keys/${i}`).find((request) => JSON.parse(request.body).id === lastEvent);
    await world.receiver.waitFor(() => endpoints.every((_, i) => lastRequest(i) !== undefined), 60_000);
    for (const [i, endpoint] of endpoints.entries()) {
      const request = lastRequest(i)!;
      const secrets = i === 0 ? [rotated] : [endpoint.secret];
      expect(verifyWebhook({ rawBody: request.body, headers: request.headers, secrets }), `endpoint ${i}`).toBeTruthy();
    }
    // Still in the rotation's grace period: the rotated endpoint's delivery is signed with its old secret too.
    const rotatedRequest = lastRequest(0)!;
    expect(
      verifyWebhook({ rawBody: rotatedRequest.body, headers: rotatedRequest.headers, secrets: [endpoints[0]!.secret] }),
    ).toBeTruthy();
    await retired.stop();
  });

  it('signs from memory: a secret opened once is not decrypted again per delivery', async () => {
    // The dispatcher's own copy of the keyring, spoiled below: only a decryption would notice.
    // (The first test left rows under the new key: the start check wants that key too.)
    const keyring = [{ id: TEST_KEYRING[0].id, key: Buffer.from(TEST_KEYRING[0].key) }, NEW_KEY] as const;
    const orgId = 'org-cached-secrets';
    const cached = await world.harness.createEndpoint(orgId, world.receiver.url('/cached'));
    const dispatcher = await world.harness.startDispatcher({ timeoutMs: 10_000 }, keyring);
    await world.harness.publish(orgId);
    await world.receiver.waitFor(() => world.receiver.requestsTo('/cached').length === 1);
    keyring[0].key.fill(0);

    const fresh = await world.harness.createEndpoint(orgId, world.receiver.url('/fresh'));
    const [eventId] = await world.harness.publish(orgId);
    await world.receiver.waitFor(() => world.receiver.requestsTo('/cached').length === 2);
    const [, second] = world.receiver.requestsTo('/cached');
    expect(JSON.parse(second!.body).id).toBe(eventId);
    expect(verifyWebhook({ rawBody: second!.body, headers: second!.headers, secrets: [cached.secret] })).toBeTruthy();
    // The endpoint whose secret was never opened cannot be signed for: a failed attempt, retried, never a crash.
    await waitFor('the unopenable secret to fail an attempt', async () => {
      const attempts = await world.harness.db
        .selectFrom('webhook_attempt_log')
        .innerJoin('webhook_deliveries', 'webhook_deliveries.id', 'webhook_attempt_log.delivery_id')
        .select('webhook_attempt_log.error')
        .where('webhook_deliveries.endpoint_id', '=', fresh.id)
        .execute();
      return attempts.some((attempt) =>
        /does not open with key "test" of HERALD_ENCRYPTION_KEYS/.test(attempt.error ?? ''),
      );
    });
    expect(world.receiver.requestsTo('/fresh')).toEqual([]);
    await dispatcher.stop();
  });
});
