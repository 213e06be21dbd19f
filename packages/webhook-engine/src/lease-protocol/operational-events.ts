import { newEventId, WEBHOOK_DELIVERY_DEAD_EVENT, WEBHOOK_ENDPOINT_DISABLED_EVENT } from '@herald/contracts';
import {
  assertValidWebhookEvent,
  type Database,
  InvalidWebhookEventError,
  takeOrgOrderLock,
  type WebhookEndpoint,
} from '@herald/db';
import { type Kysely, type RawBuilder, sql } from 'kysely';

/*
 * The operational events Herald writes to the outbox beside a change of state it makes itself:
 * `webhook.endpoint.disabled` (an endpoint disabled by its failures in the record, step 4 of
 * lease-protocol.ts, or by an operator here) and `webhook.delivery.dead` (step 4). Their bodies are
 * built once, in SQL, by the builders below, so that step 4 writes them in the statement that
 * disables or kills; their ids come from @herald/contracts' `newEventId`, passed in as parameters.
 * docs/webhooks.md shows the bodies; the event catalog holds their schemas.
 */

/** `now()` as the ISO 8601 UTC text a webhook body's `created` carries. */
const ISO_NOW = sql<string>`to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** The columns of a disabled endpoint its event is built from (SQL expressions). */
export interface EndpointDisabledColumns {
  eventId: RawBuilder<unknown>;
  endpointId: RawBuilder<unknown>;
  url: RawBuilder<unknown>;
  reason: RawBuilder<unknown>;
}

/** `webhook.endpoint.disabled`'s body, as JSON text: disabled now, for `reason`. */
export function endpointDisabledBody(row: EndpointDisabledColumns): RawBuilder<string> {
  return sql<string>`json_build_object('id', ${row.eventId}, 'type', ${WEBHOOK_ENDPOINT_DISABLED_EVENT}::text,
    'created', ${ISO_NOW}, 'data', json_build_object('endpointId', ${row.endpointId}, 'url', ${row.url},
      'reason', ${row.reason}, 'disabledAt', ${ISO_NOW}))::text`;
}

/** The columns of a dead delivery its event is built from (SQL expressions). */
export interface DeliveryDeadColumns {
  eventId: RawBuilder<unknown>;
  deliveryId: RawBuilder<unknown>;
  endpointId: RawBuilder<unknown>;
  deliveredEventId: RawBuilder<unknown>;
  eventType: RawBuilder<unknown>;
  attempts: RawBuilder<unknown>;
  lastError: RawBuilder<unknown>;
}

/** `webhook.delivery.dead`'s body, as JSON text. */
export function deliveryDeadBody(row: DeliveryDeadColumns): RawBuilder<string> {
  return sql<string>`json_build_object('id', ${row.eventId}, 'type', ${WEBHOOK_DELIVERY_DEAD_EVENT}::text,
    'created', ${ISO_NOW}, 'data', json_build_object('deliveryId', ${row.deliveryId}, 'endpointId', ${row.endpointId},
      'eventId', ${row.deliveredEventId}, 'eventType', ${row.eventType}, 'attempts', ${row.attempts},
      'lastError', ${row.lastError}))::text`;
}

export interface DisableEndpointInput {
  id: string;
  /** The organisations the caller may act on; an endpoint outside them is treated as absent. */
  orgIds: readonly string[];
  /** Stored as `disabled_reason`, sent in the operational event. */
  reason: string;
  /**
   * Called when the operational event's body does not match the event catalog (a bug): the endpoint is
   * disabled all the same and the event is not recorded. Without it, the error is thrown and nothing
   * changes.
   */
  onInvalidEvent?: (error: InvalidWebhookEventError) => void;
}

/**
 * An operator's disable (GraphQL `disableWebhookEndpoint`): the endpoint gets no new deliveries (the
 * claim makes them SKIPPED). When it was enabled, records a `webhook.endpoint.disabled` event for the
 * organisation's other endpoints in the same transaction, with the body step 4 writes when an endpoint
 * disables itself. Disabling a disabled endpoint changes nothing and records no second event.
 * @returns the endpoint, or undefined when it does not exist or is outside `orgIds`
 */
export async function disableWebhookEndpoint(
  db: Kysely<Database>,
  input: DisableEndpointInput,
): Promise<WebhookEndpoint | undefined> {
  if (input.orgIds.length === 0) return undefined;
  const eventId = newEventId();
  return db.transaction().execute(async (trx) => {
    const disabled = await trx
      .updateTable('webhook_endpoints')
      .set({ status: 'DISABLED', disabled_at: sql<Date>`now()`, disabled_reason: input.reason })
      .where('id', '=', input.id)
      .where('org_id', 'in', [...input.orgIds])
      .where('deleted_at', 'is', null)
      .where('status', '=', 'ENABLED')
      .returningAll()
      .returning(
        endpointDisabledBody({
          eventId: sql`${eventId}::text`,
          endpointId: sql.ref('webhook_endpoints.id'),
          url: sql.ref('webhook_endpoints.url'),
          reason: sql`${input.reason}::text`,
        }).as('event_body'),
      )
      .executeTakeFirst();
    if (!disabled) {
      return trx
        .selectFrom('webhook_endpoints')
        .selectAll()
        .where('id', '=', input.id)
        .where('org_id', 'in', [...input.orgIds])
        .where('deleted_at', 'is', null)
        .executeTakeFirst();
    }
    const { event_body: body, ...endpoint } = disabled;
    try {
      assertValidWebhookEvent({ id: eventId, type: WEBHOOK_ENDPOINT_DISABLED_EVENT, body });
    } catch (error) {
      if (!(error instanceof InvalidWebhookEventError) || !input.onInvalidEvent) throw error;
      input.onInvalidEvent(error);
      return endpoint;
    }
    // The organisation's ordering lock when it has a FIFO endpoint, held to the commit (see orgOrderLock).
    await takeOrgOrderLock(trx, endpoint.org_id);
    await trx
      .insertInto('webhook_outbox')
      .values({
        id: eventId,
        org_id: endpoint.org_id,
        type: WEBHOOK_ENDPOINT_DISABLED_EVENT,
        body,
        exclude_endpoint_id: endpoint.id,
      })
      .execute();
    return endpoint;
  });
}
