import { TEST_KEYRING } from '@herald/testing';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { HeraldDatabase } from './create-database.js';
import type { Database } from './database.js';
import { testBackends } from './testing.js';
import { enableWebhookEndpoint, getEndpointSuccessRates } from './webhook-endpoint-health.js';
import { insertWebhookEndpoint } from './webhook-endpoints.js';

// The operator's endpoint tools on both backends (embedded mode runs them on PGlite). Replaying dead
// letters and the test send change deliveries: the webhook engine's lease-protocol/replay.test.ts.

const backends = testBackends(() => inject('databaseUrl'));

describe.each(backends)('endpoint health and delivery tools on $name', ({ openMigrated }) => {
  let database: HeraldDatabase;
  let db: Kysely<Database>;
  let counter = 0;

  beforeAll(async () => {
    ({ database, db } = await openMigrated());
  });

  afterAll(() => database.close());

  async function endpoint(orgId = 'org-h') {
    counter += 1;
    return insertWebhookEndpoint(db, {
      orgId,
      url: `https://example.com/${counter}`,
      eventTypes: ['post.published'],
      secret: `whsec_${counter}`,
      keyring: TEST_KEYRING,
    });
  }

  /**
   * A delivery of a fresh event with attempts of these statuses, oldest first. A SUCCEEDED delivery's last
   * attempt is kept on its row, as the webhook engine's record does (`succeeded_at`, `success_*`).
   */
  async function deliveryWithAttempts(endpointId: string, statuses: number[], status = 'DEAD') {
    counter += 1;
    const eventId = `evt_h${counter}`;
    await sql`insert into webhook_outbox (id, org_id, type, body) values (${eventId}, 'org-h', 'post.published', '{}')`.execute(
      db,
    );
    await sql`insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, status, next_attempt_at, attempt_count)
      values (${`del_h${counter}`}, ${eventId}, ${endpointId}, 'org-h', 'post.published', ${status}, null, ${statuses.length})`.execute(
      db,
    );
    for (const [index, statusCode] of statuses.entries()) {
      const at = new Date(Date.now() - 60_000 + counter * 100 + index);
      if (status === 'SUCCEEDED' && index === statuses.length - 1) {
        await sql`update webhook_deliveries set succeeded_at = ${at}, success_status_code = ${statusCode},
          success_duration_ms = 1 where id = ${`del_h${counter}`}`.execute(db);
        continue;
      }
      await db
        .insertInto('webhook_attempts')
        .values({
          delivery_id: `del_h${counter}`,
          at,
          status_code: statusCode,
          duration_ms: 1,
          error: null,
        })
        .execute();
    }
    return `del_h${counter}`;
  }

  it('enables only within the organisations given, and clears the disable, the streak and any pause', async () => {
    const target = await endpoint();
    // (Disabling records an event: the webhook engine's lease-protocol/operational-events.test.ts.)
    await db
      .updateTable('webhook_endpoints')
      .set({ status: 'DISABLED', disabled_at: new Date(), disabled_reason: 'manual', paused_until: new Date() })
      .where('id', '=', target.id)
      .execute();
    await db.updateTable('webhook_endpoints').set({ failing_since: new Date() }).where('id', '=', target.id).execute();
    expect(await enableWebhookEndpoint(db, target.id, [])).toBeUndefined();
    expect(await enableWebhookEndpoint(db, target.id, ['org-other'])).toBeUndefined();
    expect(await enableWebhookEndpoint(db, target.id, ['org-h'])).toMatchObject({
      status: 'ENABLED',
      disabled_at: null,
      disabled_reason: null,
      failing_since: null,
      paused_until: null,
    });
  });

  it('computes success rates for several endpoints in one call', async () => {
    const [good, mixed, none] = [await endpoint(), await endpoint(), await endpoint()];
    await deliveryWithAttempts(good.id, [200], 'SUCCEEDED');
    await deliveryWithAttempts(mixed.id, [500, 502]);
    await deliveryWithAttempts(mixed.id, [503, 200], 'SUCCEEDED');
    expect(await getEndpointSuccessRates(db, [good.id, mixed.id, none.id, 'we_unknown'])).toEqual([
      { attempts: 1, succeeded: 1 },
      { attempts: 4, succeeded: 1 },
      { attempts: 0, succeeded: 0 },
      { attempts: 0, succeeded: 0 },
    ]);
    // The latest two: the success kept on its delivery, and the 503 before it.
    expect(await getEndpointSuccessRates(db, [mixed.id], 2)).toEqual([{ attempts: 2, succeeded: 1 }]);
    expect(await getEndpointSuccessRates(db, [mixed.id], 1)).toEqual([{ attempts: 1, succeeded: 1 }]);
  });
});
