import { newEventId } from '@herald/contracts';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';

// `giveUpWebhookDelivery` over GraphQL: a PENDING delivery that has failed becomes DEAD at once; what
// cannot be given up is refused with a coded error naming why, and another organisation's delivery is
// not found. (The engine's behaviour under a running dispatcher: webhook-engine lease-protocol/give-up.test.ts.)

const CREATE = /* GraphQL */ `
  mutation Create($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }
`;
const GIVE_UP = /* GraphQL */ `
  mutation GiveUp($id: ID!) { giveUpWebhookDelivery(id: $id) { id status nextAttemptAt attempts { error } } }
`;

/** A public address that needs no DNS; its deliveries are written by hand and never due. */
const PUBLIC_URL = 'https://93.184.215.14/hooks/herald';

let api: TestApi;
let alice: string; // member of org-gu-a
let bob: string; // member of org-gu-b
let endpointId: string;

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl') });
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-gu-a'] });
  bob = await api.token({ sub: 'bob', name: 'Bob', orgs: ['org-gu-b'] });
  const input = { orgId: 'org-gu-a', url: PUBLIC_URL, eventTypes: ['post.published'] };
  endpointId = (await api.graphql(CREATE, { input }, alice)).body.data.createWebhookEndpoint.endpoint.id;
});

afterAll(() => api.close());

/** A delivery of a new event to the endpoint, due in an hour, with `failures` failed attempts (HTTP 500). */
async function pendingDelivery(failures: number): Promise<string> {
  const db = api.app.database.db;
  const eventId = newEventId();
  const id = `del_${eventId.slice(4)}`;
  await sql`insert into webhook_outbox (id, org_id, type, body, dispatched_at)
    values (${eventId}, 'org-gu-a', 'post.published', '{}', now())`.execute(db);
  await sql`insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, attempt_count, next_attempt_at)
    values (${id}, ${eventId}, ${endpointId}, 'org-gu-a', 'post.published', ${failures}, now() + interval '1 hour')`.execute(
    db,
  );
  for (let i = 0; i < failures; i++) {
    await sql`insert into webhook_attempts (delivery_id, at, status_code, duration_ms, error)
      values (${id}, now(), 500, 3, 'HTTP 500')`.execute(db);
  }
  return id;
}

const errorOf = (body: { errors?: Array<{ message: string; extensions?: Record<string, unknown> }> }) => ({
  code: body.errors?.[0]?.extensions?.code,
  message: body.errors?.[0]?.message,
});

describe('giveUpWebhookDelivery', () => {
  it('makes a failed PENDING delivery DEAD now, with its attempts kept', async () => {
    const id = await pendingDelivery(2);
    const { body } = await api.graphql(GIVE_UP, { id }, alice);
    expect(body.errors).toBeUndefined();
    expect(body.data.giveUpWebhookDelivery).toEqual({
      id,
      status: 'DEAD',
      nextAttemptAt: null,
      attempts: [{ error: 'HTTP 500' }, { error: 'HTTP 500' }],
    });
  });

  it('refuses a delivery that is not PENDING, or not attempted yet, saying why, and changes nothing', async () => {
    const dead = await pendingDelivery(1);
    await api.graphql(GIVE_UP, { id: dead }, alice);
    expect(errorOf((await api.graphql(GIVE_UP, { id: dead }, alice)).body)).toEqual({
      code: 'BAD_USER_INPUT',
      message: 'only a PENDING delivery can be given up; this one is DEAD',
    });
    const fresh = await pendingDelivery(0);
    expect(errorOf((await api.graphql(GIVE_UP, { id: fresh }, alice)).body)).toEqual({
      code: 'BAD_USER_INPUT',
      message: 'this delivery has not been attempted yet: there is nothing to give up on',
    });
    const row = await api.app.database.db
      .selectFrom('webhook_deliveries')
      .select(['status', 'next_attempt_at'])
      .where('id', '=', fresh)
      .executeTakeFirstOrThrow();
    expect(row.status).toBe('PENDING');
    expect(row.next_attempt_at).not.toBeNull();
  });

  it("answers NOT_FOUND for another organisation's delivery, UNAUTHENTICATED without a token, and leaves it PENDING", async () => {
    const id = await pendingDelivery(1);
    expect(errorOf((await api.graphql(GIVE_UP, { id }, bob)).body).code).toBe('NOT_FOUND');
    expect(errorOf((await api.graphql(GIVE_UP, { id: 'del_nope' }, alice)).body).code).toBe('NOT_FOUND');
    expect(errorOf((await api.graphql(GIVE_UP, { id })).body).code).toBe('UNAUTHENTICATED');
    const row = await api.app.database.db
      .selectFrom('webhook_deliveries')
      .select('status')
      .where('id', '=', id)
      .executeTakeFirstOrThrow();
    expect(row.status).toBe('PENDING');
  });
});
