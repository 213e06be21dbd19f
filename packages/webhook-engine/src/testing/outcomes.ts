import type { AttemptOutcome, ClaimedDelivery } from '../lease-protocol.js';

/**
 * What `decide()` in attempt-batch.ts makes of an attempt of `delivery`, for tests and benchmarks that
 * record outcomes without POSTing: a 200 by default, `fields` overriding any part.
 */
export function attemptOutcome(
  delivery: Pick<ClaimedDelivery, 'id' | 'endpointId' | 'lease'> & Partial<ClaimedDelivery>,
  fields: Partial<AttemptOutcome> = {},
): AttemptOutcome {
  return {
    deliveryId: delivery.id,
    endpointId: delivery.endpointId,
    eventId: delivery.eventId ?? 'evt_00000000000000000000000000000000',
    eventType: delivery.eventType ?? 'post.published',
    attempt: (delivery.attemptCount ?? 0) + 1,
    url: delivery.url ?? 'https://example.com/hook',
    lease: delivery.lease,
    at: new Date(),
    statusCode: 200,
    durationMs: 1,
    error: null,
    responseBody: null,
    next: { status: 'SUCCEEDED' },
    health: 'success',
    ...fields,
  };
}
