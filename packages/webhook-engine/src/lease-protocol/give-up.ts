import { type Database, InvalidWebhookEventError, type WebhookDelivery, type WebhookDeliveryStatus } from '@herald/db';
import { type Kysely, sql } from 'kysely';
import { checkedOperationalEvent, deliveryDeadEvent, insertOperationalEvent } from './operational-events.js';

/*
 * Giving up on a delivery by hand (GraphQL `giveUpWebhookDelivery`): what the retry horizon does on
 * its own, now. Part of the lease protocol (lease-protocol.ts, "Outside the four steps"). The use it is
 * made for: the head of a FIFO endpoint's line that will keep failing (the receiver rejects that one
 * event), which otherwise holds every later delivery back until the horizon; once it is DEAD the next
 * one is the head and goes at the dispatchers' next pass. Like any dead letter it can be replayed.
 */

export interface GiveUpInput {
  id: string;
  /** The organisations the caller may act on; a delivery outside them is treated as absent. */
  orgIds: readonly string[];
  /**
   * Called when the `webhook.delivery.dead` body does not match the event catalog (a bug): the delivery
   * is DEAD all the same and the event is not recorded. Without it, the error is thrown and nothing changes.
   */
  onInvalidEvent?: (error: InvalidWebhookEventError) => void;
}

/** What giving up did: the delivery now DEAD, or why it was left as it was. */
export type GiveUpResult =
  | { outcome: 'dead'; delivery: WebhookDelivery }
  | { outcome: 'absent' }
  /** Only a PENDING delivery can be given up; this one is not. */
  | { outcome: 'not-pending'; status: WebhookDeliveryStatus }
  /** Not attempted yet: nothing has failed, there is nothing to give up on. */
  | { outcome: 'not-attempted' }
  /** An attempt is in flight (a live attempt lease): its record will say how it went. */
  | { outcome: 'in-flight'; leasedUntil: Date };

/**
 * Makes a PENDING delivery that has been attempted, and has no attempt in flight, DEAD now, in one
 * transaction with its `webhook.delivery.dead` event (the body the dispatcher writes at the horizon,
 * with the last attempt's error), for the organisation's other endpoints. It clears a queued lease,
 * so a dispatcher that later claims the delivery finds nothing to do; the dead-letter stream then
 * carries it like any other dead letter.
 */
export async function giveUpWebhookDelivery(db: Kysely<Database>, input: GiveUpInput): Promise<GiveUpResult> {
  if (input.orgIds.length === 0) return { outcome: 'absent' };
  return db.transaction().execute(async (trx) => {
    // Locked first: a claim or a record waits for this transaction and then sees the delivery DEAD.
    const delivery = await trx
      .selectFrom('webhook_deliveries')
      .selectAll()
      .select(sql<boolean>`lease_token like 'a:%' and leased_until > now()`.as('in_flight'))
      .where('id', '=', input.id)
      .where('org_id', 'in', [...input.orgIds])
      .forUpdate()
      .executeTakeFirst();
    if (!delivery) return { outcome: 'absent' };
    if (delivery.status !== 'PENDING') return { outcome: 'not-pending', status: delivery.status };
    if (delivery.attempt_count === 0) return { outcome: 'not-attempted' };
    // `a:` is the attempt lease's prefix (ATTEMPT_LEASE_PREFIX in lease-protocol.ts).
    if (delivery.in_flight) return { outcome: 'in-flight', leasedUntil: delivery.leased_until! };
    const dead = await trx
      .updateTable('webhook_deliveries')
      .set({
        status: 'DEAD',
        next_attempt_at: null,
        lease_token: null,
        leased_until: null,
        dead_letter_streamed_at: null,
        updated_at: sql<Date>`now()`,
      })
      .where('id', '=', delivery.id)
      .returningAll()
      .executeTakeFirstOrThrow();
    const last = await trx
      .selectFrom('webhook_attempts')
      .select('error')
      .where('delivery_id', '=', delivery.id)
      .orderBy('at', 'desc')
      .orderBy('id', 'desc')
      .limit(1)
      .executeTakeFirst();
    const event = checkedOperationalEvent(
      deliveryDeadEvent({
        deliveryId: dead.id,
        endpointId: dead.endpoint_id,
        eventId: dead.event_id,
        eventType: dead.event_type,
        attempts: dead.attempt_count,
        lastError: last?.error ?? null,
        at: dead.updated_at,
      }),
    );
    if (event instanceof InvalidWebhookEventError) {
      if (!input.onInvalidEvent) throw event;
      input.onInvalidEvent(event);
      return { outcome: 'dead', delivery: dead };
    }
    await insertOperationalEvent(trx, dead.org_id, dead.endpoint_id, event);
    return { outcome: 'dead', delivery: dead };
  });
}
