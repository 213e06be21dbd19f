import DataLoader from 'dataloader';
import { type Kysely, sql } from 'kysely';
import type { Database } from './database.js';
import type { WebhookEndpoint } from './webhook-tables.js';

/*
 * Endpoint health as an operator reads and resets it: enable over GraphQL, and the recent success
 * rate the console shows. Disabling, by an operator or by the engine itself (410, failing for
 * WEBHOOK_DISABLE_AFTER), records an event and lives in the webhook engine's lease protocol
 * (lease-protocol/operational-events.ts); it changes the same columns.
 */

/** Attempts the success rate looks back over when the caller does not say. */
export const DEFAULT_SUCCESS_RATE_ATTEMPTS = 100;

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
    .where('deleted_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}

export interface EndpointSuccessRate {
  /** Attempts counted: the endpoint's latest, at most the number asked for. */
  attempts: number;
  /** How many of them the receiver answered 2xx. */
  succeeded: number;
}

/**
 * For each endpoint, how many of its latest attempts succeeded (2xx): the latest `lastAttempts`
 * attempts among its `lastAttempts` most recent deliveries that have been attempted. Bounded work per
 * endpoint whatever its history (the `(endpoint_id, seq)` and `delivery_id` indexes), in one statement
 * for all endpoints; a retry of a delivery older than those is not counted.
 * @returns one entry per id, in the order given (zero attempts for an unknown id)
 */
export async function getEndpointSuccessRates(
  db: Kysely<Database>,
  endpointIds: readonly string[],
  lastAttempts: number = DEFAULT_SUCCESS_RATE_ATTEMPTS,
): Promise<EndpointSuccessRate[]> {
  if (endpointIds.length === 0) return [];
  const { rows } = await sql<{ endpoint_id: string; attempts: number; succeeded: number }>`
    select endpoint.id as endpoint_id, rate.attempts, rate.succeeded
    from unnest(${[...endpointIds]}::text[]) as endpoint(id)
    cross join lateral (
      select count(*)::int as attempts,
             count(*) filter (where latest.status_code between 200 and 299)::int as succeeded
      from (
        select attempt.status_code
        from (
          select id from webhook_deliveries
          where endpoint_id = endpoint.id and attempt_count > 0
          order by seq desc
          limit ${lastAttempts}
        ) delivery
        -- Per delivery, by its id in both of the view's parts (\`offset 0\` keeps the planner from
        -- flattening this into a hash join over both whole tables).
        cross join lateral (
          select log.at, log.id, log.status_code from webhook_attempt_log log
          where log.delivery_id = delivery.id
          offset 0
        ) attempt
        order by attempt.at desc, attempt.id desc nulls first
        limit ${lastAttempts}
      ) latest
    ) rate
  `.execute(db);
  const byId = new Map(rows.map((row) => [row.endpoint_id, row]));
  return endpointIds.map((id) => ({ attempts: byId.get(id)?.attempts ?? 0, succeeded: byId.get(id)?.succeeded ?? 0 }));
}

export type EndpointSuccessRateLoader = DataLoader<string, EndpointSuccessRate>;

/**
 * Batches success-rate look-ups of one window size by endpoint id: a list of N endpoints costs one
 * query. Create one per request; its cache must never outlive the operation.
 */
export function createEndpointSuccessRateLoader(db: Kysely<Database>, lastAttempts: number): EndpointSuccessRateLoader {
  return new DataLoader((endpointIds) => getEndpointSuccessRates(db, endpointIds, lastAttempts));
}
