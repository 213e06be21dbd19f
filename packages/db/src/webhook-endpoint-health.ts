import { randomUUID } from 'node:crypto';
import { WEBHOOK_EVENT_ID_PREFIX } from '@herald/contracts';
import { type Kysely, sql } from 'kysely';
import type { Database } from './database.js';
import type { WebhookEndpoint } from './webhook-tables.js';

/*
 * Endpoint health as an operator drives it (SPEC §7.2): disable and enable over GraphQL, and the
 * recent success rate the console shows. The engine disables endpoints by itself (410, failing for
 * WEBHOOK_DISABLE_AFTER) through the same columns.
 */

/** Operational event type recorded when an endpoint is disabled (SPEC §7.2). */
export const ENDPOINT_DISABLED_EVENT_TYPE = 'webhook.endpoint.disabled';
/** Attempts the success rate looks back over when the caller does not say. */
export const DEFAULT_SUCCESS_RATE_ATTEMPTS = 100;

export interface DisableEndpointInput {
  id: string;
  /** The organisations the caller may act on; an endpoint outside them is treated as absent. */
  orgIds: readonly string[];
  /** Stored as `disabled_reason`, sent in the operational event. */
  reason: string;
}

/**
 * Disables an endpoint: it gets no new deliveries (the engine records them SKIPPED). When it was
 * enabled, records a `webhook.endpoint.disabled` event (data `{ endpointId, url, reason, disabledAt }`)
 * for the organisation's other endpoints, in the same transaction. Disabling a disabled endpoint
 * changes nothing and records no second event.
 * @returns the endpoint, or undefined when it does not exist or is outside `orgIds`
 */
export async function disableWebhookEndpoint(
  db: Kysely<Database>,
  input: DisableEndpointInput,
): Promise<WebhookEndpoint | undefined> {
  if (input.orgIds.length === 0) return undefined;
  return db.transaction().execute(async (trx) => {
    const disabled = await trx
      .updateTable('webhook_endpoints')
      .set({ status: 'DISABLED', disabled_at: sql<Date>`now()`, disabled_reason: input.reason })
      .where('id', '=', input.id)
      .where('org_id', 'in', [...input.orgIds])
      .where('status', '=', 'ENABLED')
      .returningAll()
      .executeTakeFirst();
    if (!disabled) {
      return trx
        .selectFrom('webhook_endpoints')
        .selectAll()
        .where('id', '=', input.id)
        .where('org_id', 'in', [...input.orgIds])
        .executeTakeFirst();
    }
    const disabledAt = disabled.disabled_at ?? new Date();
    const id = `${WEBHOOK_EVENT_ID_PREFIX}${randomUUID().replaceAll('-', '')}`;
    const body = JSON.stringify({
      id,
      type: ENDPOINT_DISABLED_EVENT_TYPE,
      created: disabledAt.toISOString(),
      data: { endpointId: disabled.id, url: disabled.url, reason: input.reason, disabledAt: disabledAt.toISOString() },
    });
    await trx
      .insertInto('webhook_outbox')
      .values({
        id,
        org_id: disabled.org_id,
        type: ENDPOINT_DISABLED_EVENT_TYPE,
        body,
        created_at: disabledAt,
        exclude_endpoint_id: disabled.id,
      })
      .execute();
    return disabled;
  });
}

/**
 * Enables an endpoint and forgets its failure streak (`failing_since`) and any pause (`paused_until`),
 * so the engine starts counting afresh. Deliveries SKIPPED meanwhile stay skipped.
 * @returns the endpoint, or undefined when it does not exist or is outside `orgIds`
 */
export async function enableWebhookEndpoint(
  db: Kysely<Database>,
  id: string,
  orgIds: readonly string[],
): Promise<WebhookEndpoint | undefined> {
  if (orgIds.length === 0) return undefined;
  return db
    .updateTable('webhook_endpoints')
    .set({ status: 'ENABLED', disabled_at: null, disabled_reason: null, failing_since: null, paused_until: null })
    .where('id', '=', id)
    .where('org_id', 'in', [...orgIds])
    .returningAll()
    .executeTakeFirst();
}

export interface EndpointSuccessRate {
  /** Attempts counted: the endpoint's latest, at most the number asked for. */
  attempts: number;
  /** How many of them the receiver answered 2xx. */
  succeeded: number;
}

/** Of an endpoint's latest `lastAttempts` attempts, how many succeeded (2xx). */
export async function getEndpointSuccessRate(
  db: Kysely<Database>,
  endpointId: string,
  lastAttempts: number = DEFAULT_SUCCESS_RATE_ATTEMPTS,
): Promise<EndpointSuccessRate> {
  const { rows } = await sql<{ attempts: number; succeeded: number }>`
    select count(*)::int as attempts,
           count(*) filter (where status_code between 200 and 299)::int as succeeded
    from (
      select attempt.status_code
      from webhook_attempts attempt
      join webhook_deliveries delivery on delivery.id = attempt.delivery_id
      where delivery.endpoint_id = ${endpointId}
      order by attempt.at desc, attempt.id desc
      limit ${lastAttempts}
    ) latest
  `.execute(db);
  return { attempts: rows[0]?.attempts ?? 0, succeeded: rows[0]?.succeeded ?? 0 };
}
