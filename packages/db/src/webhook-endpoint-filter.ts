import type { WebhookEventFilter } from '@herald/contracts';
import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import type { WebhookEndpoint } from './webhook-tables.js';

/**
 * Sets (or with null, removes) an endpoint's filter on the event body. The fan-out applies it to every
 * event it has not turned into deliveries yet; deliveries already made are not touched. The caller checks the
 * filter first (`parseWebhookEventFilter`).
 * @param orgIds the organisations the caller may act on; an endpoint outside them is treated as absent
 * @returns the endpoint, or undefined when it does not exist, is deleted or is outside `orgIds`
 */
export async function setWebhookEndpointFilter(
  db: Kysely<Database>,
  id: string,
  orgIds: readonly string[],
  filter: WebhookEventFilter | null,
): Promise<WebhookEndpoint | undefined> {
  if (orgIds.length === 0) return undefined;
  return db
    .updateTable('webhook_endpoints')
    .set({ filter: filter === null ? null : JSON.stringify(filter) })
    .where('id', '=', id)
    .where('org_id', 'in', [...orgIds])
    .where('deleted_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}
