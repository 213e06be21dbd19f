import { newDeliveryId, newEventId, WEBHOOK_TEST_EVENT } from '@herald/contracts';
import { assertValidWebhookEvent, type Database, type WebhookDelivery, type WebhookEndpoint } from '@herald/db';
import { type Kysely, sql } from 'kysely';

/*
 * The test send (GraphQL `sendTestWebhook`): the one delivery made outside the fan-out (step 1 of
 * lease-protocol.ts), so that the API can return it at once.
 */

/**
 * Records a `webhook.test` event for one endpoint (outbox `target_endpoint_id`) and its delivery, in
 * one transaction, so the delivery can be returned and queried at once; the engine's fan-out finds it
 * already there (deliveries are unique per event and endpoint) and makes no other. The delivery is
 * free and due now (the due scan hands it out), or SKIPPED (never sent) when the endpoint is disabled
 * or deleted. Body data: `{ endpointId, message }`.
 * @throws InvalidWebhookEventError when the body does not match the catalog (nothing is recorded)
 */
export async function insertTestWebhook(db: Kysely<Database>, endpoint: WebhookEndpoint): Promise<WebhookDelivery> {
  return db.transaction().execute(async (trx) => {
    const created = new Date();
    const eventId = newEventId();
    const body = JSON.stringify({
      id: eventId,
      type: WEBHOOK_TEST_EVENT,
      created: created.toISOString(),
      data: { endpointId: endpoint.id, message: 'A test event sent from Herald: your receiver is reachable.' },
    });
    assertValidWebhookEvent({ id: eventId, type: WEBHOOK_TEST_EVENT, body });
    await trx
      .insertInto('webhook_outbox')
      .values({
        id: eventId,
        org_id: endpoint.org_id,
        type: WEBHOOK_TEST_EVENT,
        body,
        created_at: created,
        target_endpoint_id: endpoint.id,
      })
      .execute();
    const current = await trx
      .selectFrom('webhook_endpoints')
      .select(['status', 'deleted_at'])
      .where('id', '=', endpoint.id)
      .forShare()
      .executeTakeFirst();
    const skipped = current?.status !== 'ENABLED' || current.deleted_at !== null;
    return trx
      .insertInto('webhook_deliveries')
      .values({
        id: newDeliveryId(),
        event_id: eventId,
        endpoint_id: endpoint.id,
        org_id: endpoint.org_id,
        event_type: WEBHOOK_TEST_EVENT,
        status: skipped ? 'SKIPPED' : 'PENDING',
        next_attempt_at: skipped ? null : sql<Date>`now()`,
        lease_token: null,
        leased_until: null,
      })
      .returningAll()
      .executeTakeFirstOrThrow();
  });
}
