import { newEventId, POST_PUBLISHED_EVENT } from '@herald/contracts';
import { createTestSchema } from '@herald/testing';
import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createDatabase, type HeraldDatabase } from './create-database.js';
import type { Database } from './database.js';
import { migrateToLatest } from './migrate.js';
import { InvalidWebhookEventError } from './webhook-event-check.js';
import { insertOutboxEvent } from './webhook-outbox.js';

// Events built in TypeScript are checked against the event catalog before they are recorded: the
// bodies the real writers build pass, and a body that does not match is refused before any write.

let database: HeraldDatabase;
let db: Kysely<Database>;

beforeAll(async () => {
  database = await createDatabase({ kind: 'postgres', url: (await createTestSchema(inject('databaseUrl'))).url });
  db = database.db;
  await migrateToLatest(db);
});

afterAll(() => database?.close());

async function outboxBodies(type: string) {
  const rows = await db.selectFrom('webhook_outbox').select('body').where('type', '=', type).execute();
  return rows.map((row) => row.body);
}

describe('events recorded from TypeScript', () => {
  // (webhook.test's, webhook.endpoint.disabled's and webhook.delivery.dead's bodies: the webhook engine's replay.test.ts
  // and operational-events.test.ts in lease-protocol/, where the test send, the disable and the record are.)
  it('refuses a body that does not match its schema before writing, leaving the transaction usable', async () => {
    const id = newEventId();
    const body = JSON.stringify({ id, type: POST_PUBLISHED_EVENT, created: new Date().toISOString(), data: {} });
    const committed = await db.transaction().execute(async (trx) => {
      const refused = await insertOutboxEvent(trx, { id, orgId: 'org-c', type: POST_PUBLISHED_EVENT, body }).catch(
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(InvalidWebhookEventError);
      expect(refused).toMatchObject({ code: 'INVALID_WEBHOOK_EVENT', eventId: id, type: POST_PUBLISHED_EVENT });
      expect((refused as InvalidWebhookEventError).problems.join('\n')).toMatch(/\/data\/id/);
      // The caller's own change still commits.
      return (
        await trx
          .selectFrom('webhook_outbox')
          .select((eb) => eb.fn.countAll().as('n'))
          .executeTakeFirstOrThrow()
      ).n;
    });
    expect(committed).toBeDefined();
    expect(await db.selectFrom('webhook_outbox').select('id').where('id', '=', id).execute()).toEqual([]);
  });

  it('refuses an event type that is not in the catalog', async () => {
    const id = newEventId();
    const body = JSON.stringify({ id, type: 'post.deleted', created: new Date().toISOString(), data: {} });
    await expect(insertOutboxEvent(db, { id, orgId: 'org-c', type: 'post.deleted', body })).rejects.toThrow(
      /unknown event type "post.deleted"/,
    );
    expect(await outboxBodies('post.deleted')).toEqual([]);
  });
});
