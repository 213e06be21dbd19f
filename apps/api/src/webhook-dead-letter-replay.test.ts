import { randomUUID } from 'node:crypto';
import { DEAD_LETTER_REPLAY_PAGE, replayDeadLetters } from '@herald/webhook-engine';
import { watchDeliveryUpdates } from '@herald/webhook-engine/testing';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from './testing/test-api.js';

// GraphQL's replayDeadWebhookDeliveries and the function `pnpm dlq replay` calls are one paged path
// (the webhook engine's lease-protocol/replay.ts): the same replay, cut into the same statements of at
// most a page each, each its own transaction. With REDIS_URL the API runs no dispatcher, so nothing
// changes the deliveries but the replays.

const CREATE = /* GraphQL */ `
  mutation Create($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }
`;
const REPLAY_DEAD = 'mutation($id: ID!) { replayDeadWebhookDeliveries(endpointId: $id) }';
const DEAD = DEAD_LETTER_REPLAY_PAGE * 2 + 200;

let api: TestApi;
let alice: string;

beforeAll(async () => {
  api = await startTestApi({
    databaseUrl: inject('databaseUrl'),
    env: {
      REDIS_URL: inject('redisUrl'),
      HERALD_REDIS_PREFIX: `herald-dead-replay-${randomUUID()}:`,
      WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
    },
  });
  alice = await api.token({ sub: 'alice-dead', name: 'Alice', orgs: ['org-dead'] });
});

afterAll(() => api?.close());

describe('replaying more than a page of dead letters', () => {
  it(`GraphQL and the dlq function replay all ${DEAD}, in statements of at most ${DEAD_LETTER_REPLAY_PAGE} rows each in its own transaction`, async () => {
    const db = api.app.database.db;
    const created = await api.graphql(
      CREATE,
      { input: { orgId: 'org-dead', url: 'http://127.0.0.1:9/dead', eventTypes: ['post.published'] } },
      alice,
    );
    expect(created.body.errors).toBeUndefined();
    const endpointId: string = created.body.data.createWebhookEndpoint.endpoint.id;
    const { rows: inserted } = await sql<{ id: string }>`
      insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, status, next_attempt_at,
        attempt_count, dead_letter_streamed_at)
      select 'del_dead_' || n, 'evt_dead_' || n, ${endpointId}, 'org-dead', 'post.published', 'DEAD', null, 5, now()
      from generate_series(1, ${DEAD}) n order by n
      returning id`.execute(db);
    const dead = inserted.map((row) => row.id);
    const state = async () =>
      (
        await db
          .selectFrom('webhook_deliveries')
          .select(['id', 'status', 'lease_token', 'dead_letter_streamed_at'])
          .select((eb) => eb('next_attempt_at', 'is not', null).as('due'))
          .where('endpoint_id', '=', endpointId)
          .orderBy('seq')
          .execute()
      ).map((row) => ({ ...row, due: Boolean(row.due) }));

    const watch = await watchDeliveryUpdates(db);
    try {
      // The GraphQL door.
      const { body } = await api.graphql(REPLAY_DEAD, { id: endpointId }, alice);
      expect(body).toEqual({ data: { replayDeadWebhookDeliveries: DEAD } });
      const throughGraphql = await watch.statements();
      const afterGraphql = await state();

      // Dead again, then the function `dlq replay --all` calls (apps/webhook-dispatcher dlq-cli.ts).
      await db
        .updateTable('webhook_deliveries')
        .set({ status: 'DEAD' })
        .where('endpoint_id', '=', endpointId)
        .execute();
      await watch.clear();
      const replayed: string[] = [];
      const count = await replayDeadLetters(
        db,
        { all: true },
        {
          onPage: (ids) => {
            replayed.push(...ids);
          },
        },
      );
      const throughCli = await watch.statements();

      expect(count).toBe(DEAD);
      expect(replayed).toEqual(dead);
      const pages = [DEAD_LETTER_REPLAY_PAGE, DEAD_LETTER_REPLAY_PAGE, 200];
      expect(throughGraphql.map((statement) => statement.rows)).toEqual(pages);
      expect(throughCli.map((statement) => statement.rows)).toEqual(pages);
      expect(new Set(throughGraphql.map((statement) => statement.txid)).size).toBe(pages.length);
      expect(new Set(throughCli.map((statement) => statement.txid)).size).toBe(pages.length);
      // The same end state: every one PENDING, due now, free, to be streamed again should it die again.
      expect(await state()).toEqual(afterGraphql);
      expect(afterGraphql).toEqual(
        dead.map((id) => ({ id, status: 'PENDING', lease_token: null, dead_letter_streamed_at: null, due: true })),
      );
    } finally {
      await watch.stop();
    }
  });
});
