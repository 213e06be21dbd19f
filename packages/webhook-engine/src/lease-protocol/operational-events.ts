import { newEventId, WEBHOOK_DELIVERY_DEAD_EVENT, WEBHOOK_ENDPOINT_DISABLED_EVENT } from '@herald/contracts';
import {
  assertValidWebhookEvent,
  type Database,
  InvalidWebhookEventError,
  takeOrgOrderLock,
  type WebhookEndpoint,
} from '@herald/db';
import { type Kysely, sql } from 'kysely';

/*
 * The operational events Herald writes to the outbox beside a change of state it makes itself:
 * `webhook.endpoint.disabled` (an endpoint disabled by its failures in the record, step 4 of
 * lease-protocol.ts, or by an operator here) and `webhook.delivery.dead` (step 4). Their bodies are
 * built here, in application code, and checked against the event catalog before anything is written
 * ({@link checkedOperationalEvent}); step 4 passes the checked bodies to the statement that disables or
 * kills, which writes those of the changes that stand. docs/webhooks.md shows the bodies.
 */

/** An operational event ready to be written: its id (`newEventId`), type and body as JSON text. */
export interface OperationalEvent {
  id: string;
  type: string;
  body: string;
}

/** What a `webhook.endpoint.disabled` body says. */
export interface EndpointDisabled {
  endpointId: string;
  url: string;
  reason: string;
  /** When it was disabled: the body's `created` and `disabledAt`. */
  disabledAt: Date;
}

/** `webhook.endpoint.disabled`, with a new event id. */
export function endpointDisabledEvent(input: EndpointDisabled): OperationalEvent {
  const id = newEventId();
  const at = input.disabledAt.toISOString();
  const body = {
    id,
    type: WEBHOOK_ENDPOINT_DISABLED_EVENT,
    created: at,
    data: { endpointId: input.endpointId, url: input.url, reason: input.reason, disabledAt: at },
  };
  return { id, type: WEBHOOK_ENDPOINT_DISABLED_EVENT, body: JSON.stringify(body) };
}

/** What a `webhook.delivery.dead` body says. */
export interface DeliveryDead {
  deliveryId: string;
  endpointId: string;
  /** The event the delivery carried, and its type. */
  eventId: string;
  eventType: string;
  /** Attempts made, the last one included. */
  attempts: number;
  lastError: string | null;
  /** When it was recorded DEAD: the body's `created`. */
  at: Date;
}

/** `webhook.delivery.dead`, with a new event id. */
export function deliveryDeadEvent(input: DeliveryDead): OperationalEvent {
  const id = newEventId();
  const body = {
    id,
    type: WEBHOOK_DELIVERY_DEAD_EVENT,
    created: input.at.toISOString(),
    data: {
      deliveryId: input.deliveryId,
      endpointId: input.endpointId,
      eventId: input.eventId,
      eventType: input.eventType,
      attempts: input.attempts,
      lastError: input.lastError,
    },
  };
  return { id, type: WEBHOOK_DELIVERY_DEAD_EVENT, body: JSON.stringify(body) };
}

/**
 * The event when its body matches the catalog; otherwise the error saying what does not (a bug in
 * the builder or in what it was given: the caller records its change without the event, and reports it).
 */
export function checkedOperationalEvent(event: OperationalEvent): OperationalEvent | InvalidWebhookEventError {
  try {
    assertValidWebhookEvent(event);
    return event;
  } catch (error) {
    if (error instanceof InvalidWebhookEventError) return error;
    throw error;
  }
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
  return db.transaction().execute(async (trx) => {
    const endpoint = await trx
      .updateTable('webhook_endpoints')
      .set({ status: 'DISABLED', disabled_at: sql<Date>`now()`, disabled_reason: input.reason })
      .where('id', '=', input.id)
      .where('org_id', 'in', [...input.orgIds])
      .where('deleted_at', 'is', null)
      .where('status', '=', 'ENABLED')
      .returningAll()
      .executeTakeFirst();
    if (!endpoint) {
      return trx
        .selectFrom('webhook_endpoints')
        .selectAll()
        .where('id', '=', input.id)
        .where('org_id', 'in', [...input.orgIds])
        .where('deleted_at', 'is', null)
        .executeTakeFirst();
    }
    const event = checkedOperationalEvent(
      endpointDisabledEvent({
        endpointId: endpoint.id,
        url: endpoint.url,
        reason: input.reason,
        disabledAt: endpoint.disabled_at ?? new Date(),
      }),
    );
    if (event instanceof InvalidWebhookEventError) {
      if (!input.onInvalidEvent) throw event;
      input.onInvalidEvent(event);
      return endpoint;
    }
    await insertOperationalEvent(trx, endpoint.org_id, endpoint.id, event);
    return endpoint;
  });
}

/**
 * Records `event`, about the endpoint `aboutEndpointId`, for the organisation's other endpoints, in the
 * caller's transaction: an operator's change written with its event. The organisation's ordering lock
 * (when it has a FIFO endpoint) is taken first and held to the commit (see @herald/db `orgOrderLock`).
 */
export async function insertOperationalEvent(
  trx: Kysely<Database>,
  orgId: string,
  aboutEndpointId: string,
  event: OperationalEvent,
): Promise<void> {
  await takeOrgOrderLock(trx, orgId);
  await trx
    .insertInto('webhook_outbox')
    .values({ id: event.id, org_id: orgId, type: event.type, body: event.body, exclude_endpoint_id: aboutEndpointId })
    .execute();
}
