import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { TEST_ENCRYPTION_KEYS } from '@herald/testing';
import {
  createDispatcherHarness,
  type DispatcherHarness,
  type StartedDispatcher,
  startTestReceiver,
  type TestReceiver,
  watchDeliveryUpdates,
} from '@herald/webhook-engine/testing';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createOpsServer } from './ops-server.js';

// What operators touch: /health, /readiness, /metrics, and the dead-letter CLI as
// `pnpm --filter webhook-dispatcher dlq …` runs it (tsx src/dlq-cli.ts).

const CLI = fileURLToPath(new URL('./dlq-cli.ts', import.meta.url));
// tsx's loader in this very process (`node --import tsx`), not the tsx CLI: the CLI is a wrapper process
// that would take the signal (a SIGKILL would leave the real process running on as an orphan).
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const run = promisify(execFile);

let harness: DispatcherHarness;
let receiver: TestReceiver;
let dispatcher: StartedDispatcher;

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  receiver = await startTestReceiver(() => ({ status: 500 }));
  dispatcher = await harness.startDispatcher({ retryHorizonMs: 300 });
});

afterAll(async () => {
  await receiver?.close();
  await harness?.close();
});

function dlq(...args: string[]) {
  return run(process.execPath, ['--import', TSX_LOADER, CLI, ...args], {
    env: {
      PATH: process.env.PATH,
      DATABASE_URL: harness.schema.url,
      REDIS_URL: harness.redisUrl,
      HERALD_REDIS_PREFIX: harness.redisPrefix,
      HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
    },
  });
}

describe('operations endpoints', () => {
  it('answer /health, /readiness and /metrics', async () => {
    const server = createOpsServer({ registry: dispatcher.metrics.registry, readiness: () => dispatcher.readiness() });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      expect((await fetch(`${base}/health`)).status).toBe(200);
      expect((await fetch(`${base}/readiness`)).status).toBe(200);
      const metrics = await (await fetch(`${base}/metrics`)).text();
      for (const name of [
        'herald_webhook_attempts_total',
        'herald_webhook_delivery_seconds',
        'herald_webhook_dead_letters_total',
        'herald_webhook_retry_backlog',
        'herald_webhook_stream_lag',
      ]) {
        expect(metrics).toContain(`# TYPE ${name}`);
      }
      expect((await fetch(`${base}/nope`)).status).toBe(404);
    } finally {
      server.close();
    }
  });

  it('turn readiness off once the dispatcher stops, saying so', async () => {
    const other = await harness.startDispatcher();
    expect(await other.readiness()).toEqual({ ready: true });
    await other.stop();
    expect(await other.readiness()).toEqual({ ready: false, reason: 'stopped' });
  });

  it('answer a not-ready /readiness with 503 and the reason and part', async () => {
    let answer: Awaited<ReturnType<typeof dispatcher.readiness>> & { part?: string } = {
      ready: false,
      reason: 'database unreachable',
      part: 'dispatcher',
    };
    const server = createOpsServer({ registry: dispatcher.metrics.registry, readiness: async () => answer });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const refused = await fetch(`${base}/readiness`);
      expect(refused.status).toBe(503);
      expect(await refused.json()).toEqual({ status: 'not ready', reason: 'database unreachable', part: 'dispatcher' });
      answer = { ready: true };
      expect(await (await fetch(`${base}/readiness`)).json()).toEqual({ status: 'ready' });
    } finally {
      server.close();
    }
  });
});

describe('dlq CLI', () => {
  it('lists dead letters and replays one by delivery id', async () => {
    await harness.createEndpoint('org-cli', receiver.url('/cli'));
    const [eventId] = await harness.publish('org-cli');
    let delivery: { id: string; status: string } | undefined;
    for (let i = 0; i < 400 && delivery?.status !== 'DEAD'; i++) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      delivery = await harness.db
        .selectFrom('webhook_deliveries')
        .select(['id', 'status'])
        .where('event_id', '=', eventId!)
        .executeTakeFirst();
    }
    expect(delivery?.status).toBe('DEAD');

    const listed = await dlq('list');
    expect(listed.stdout).toContain(delivery!.id);
    expect(listed.stdout).toContain(eventId);
    expect(listed.stdout).toMatch(/1 dead letter\(s\)/);
    const json = JSON.parse((await dlq('list', '--json')).stdout);
    expect(json).toEqual([
      expect.objectContaining({ status: 'DEAD', letter: expect.objectContaining({ deliveryId: delivery!.id }) }),
    ]);

    receiver.behave(() => ({ status: 200 }), '/cli');
    const replayed = await dlq('replay', delivery!.id);
    expect(replayed.stdout).toContain(`replayed ${delivery!.id}`);
    for (let i = 0; i < 400 && delivery?.status !== 'SUCCEEDED'; i++) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      delivery = await harness.db
        .selectFrom('webhook_deliveries')
        .select(['id', 'status'])
        .where('event_id', '=', eventId!)
        .executeTakeFirst();
    }
    expect(delivery?.status).toBe('SUCCEEDED');
    expect((await dlq('list')).stdout).toContain('no dead letters');
  });

  it('lists and replays 1,100 dead letters, read from the database, 500 per statement', async () => {
    receiver.behave(() => ({ status: 200 }), '/many');
    const endpoint = await harness.createEndpoint('org-many', receiver.url('/many'));
    await sql`
      insert into webhook_outbox (id, org_id, type, body, dispatched_at)
      select 'evt_many' || n, 'org-many', 'post.published', json_build_object('id', 'evt_many' || n)::text, now()
      from generate_series(1, 1100) n
    `.execute(harness.db);
    await sql`
      insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, status, attempt_count, dead_letter_streamed_at)
      select 'del_many' || n, 'evt_many' || n, ${endpoint.id}, 'org-many', 'post.published', 'DEAD', 3, now()
      from generate_series(1, 1100) n
    `.execute(harness.db);

    const listed = await dlq('list');
    expect(listed.stdout.split('\n').filter((line) => line.startsWith('del_many'))).toHaveLength(1_100);
    expect(listed.stdout).toContain('1100 dead letter(s)');
    // The dispatcher keeps running meanwhile: the replay's statements are those that replayed rows.
    const watch = await watchDeliveryUpdates(harness.db);
    let replays: number[];
    try {
      const replayed = await dlq('replay', '--all');
      expect(replayed.stdout.trim().split('\n').at(-1)).toBe('1100 replayed');
      replays = (await watch.statements()).filter((s) => s.replayed > 0).map((s) => s.replayed);
    } finally {
      await watch.stop();
    }
    // One statement per page of 500 (the same paged path as GraphQL's replayDeadWebhookDeliveries).
    expect(replays).toEqual([500, 500, 100]);
    const dead = await harness.db
      .selectFrom('webhook_deliveries')
      .select('id')
      .where('org_id', '=', 'org-many')
      .where('status', '=', 'DEAD')
      .execute();
    expect(dead).toEqual([]);
    const received = () => new Set(receiver.requestsTo('/many').map((request) => request.headers['x-webhook-id']));
    await receiver.waitFor(() => received().size === 1_100, 90_000);
    expect((await dlq('list')).stdout).toContain('no dead letters');
  }, 150_000);

  it('refuses bad usage with exit status 2', async () => {
    await expect(dlq('explode')).rejects.toMatchObject({ code: 2 });
    await expect(dlq('replay')).rejects.toMatchObject({ code: 2 });
  });
});
