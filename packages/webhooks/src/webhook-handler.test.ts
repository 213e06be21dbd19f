import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createTestSchema, type TestSchema } from '@herald/testing';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { STANDARD_WEBHOOK_SIGNATURE_HEADER, WEBHOOK_SIGNATURE_HEADER } from './headers.js';
import { createPostgresEventStore, type PostgresEventStore } from './postgres-event-store.js';
import { signWebhook } from './sign-webhook.js';
import type { WebhookEvent } from './webhook-event.js';
import { createWebhookHandler, type WebhookHandlerOptions, type WebhookHandlerStage } from './webhook-handler.js';
import { generateWebhookSecret } from './webhook-secret.js';

const SECRET = generateWebhookSecret();
const MAX_BODY_BYTES = 4_096;

let counter = 0;
function makeEvent(): WebhookEvent {
  counter += 1;
  return {
    id: `evt_handler_${counter}_${Date.now()}`,
    type: 'post.published',
    created: new Date().toISOString(),
    data: { id: `post-${counter}`, title: 'Hello' },
  };
}

function signed(event: WebhookEvent, options: { secret?: string; timestamp?: number } = {}) {
  const body = JSON.stringify(event);
  const headers = signWebhook({
    eventId: event.id,
    rawBody: body,
    secrets: [options.secret ?? SECRET],
    timestamp: options.timestamp,
  });
  return { method: 'POST', headers, body };
}

interface Receiver {
  url: string;
  enqueued: WebhookEvent[];
  errors: { error: unknown; stage: WebhookHandlerStage }[];
  /** Resolves with the next enqueued event. */
  nextEnqueued(): Promise<WebhookEvent>;
}

describe('createWebhookHandler over HTTP with the PostgreSQL store', () => {
  let schema: TestSchema;
  let pool: pg.Pool;
  let store: PostgresEventStore;
  const servers: Server[] = [];

  beforeAll(async () => {
    schema = await createTestSchema(inject('databaseUrl'));
    pool = new pg.Pool({ connectionString: schema.url });
    store = createPostgresEventStore({ pool });
    await store.createTable();
  });

  afterEach(async () => {
    await Promise.all(
      servers.splice(0).map(
        (server) =>
          new Promise<void>((resolve) => {
            server.closeAllConnections();
            server.close(() => resolve());
          }),
      ),
    );
  });

  afterAll(async () => {
    await pool.end();
    await schema.drop();
  });

  async function startReceiver(
    overrides: Partial<WebhookHandlerOptions> = {},
    enqueue?: (event: WebhookEvent) => void | Promise<void>,
  ): Promise<Receiver> {
    const enqueued: WebhookEvent[] = [];
    const errors: Receiver['errors'] = [];
    const waiting: ((event: WebhookEvent) => void)[] = [];
    const handler = createWebhookHandler({
      secrets: [SECRET],
      store,
      maxBodyBytes: MAX_BODY_BYTES,
      onError: (error, stage) => errors.push({ error, stage }),
      enqueue: (event) => {
        enqueued.push(event);
        waiting.shift()?.(event);
        return enqueue?.(event);
      },
      ...overrides,
    } as WebhookHandlerOptions);
    const server = createServer(handler);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`,
      enqueued,
      errors,
      nextEnqueued: () => new Promise((resolve) => waiting.push(resolve)),
    };
  }

  async function storedCount(eventId: string): Promise<number> {
    const { rows } = await pool.query('select count(*)::int as n from webhook_events where id = $1', [eventId]);
    return rows[0].n;
  }

  it('a valid event: 200, stored once, enqueued once', async () => {
    const receiver = await startReceiver();
    const event = makeEvent();
    const enqueued = receiver.nextEnqueued();
    const response = await fetch(receiver.url, signed(event));
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ received: true, duplicate: false });
    expect(await storedCount(event.id)).toBe(1);
    expect(await enqueued).toEqual(event);
    expect(receiver.errors).toEqual([]);
  });

  it('the same event again (a retry, even re-signed later): 200, neither stored nor enqueued twice', async () => {
    const receiver = await startReceiver();
    const event = makeEvent();
    const first = receiver.nextEnqueued();
    expect((await fetch(receiver.url, signed(event))).status).toBe(200);
    await first;

    const again = await fetch(receiver.url, signed(event, { timestamp: Math.floor(Date.now() / 1000) + 1 }));
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({ received: true, duplicate: true });

    // A later, new event is enqueued right after the first: the duplicate never was.
    const later = makeEvent();
    const laterEnqueued = receiver.nextEnqueued();
    expect((await fetch(receiver.url, signed(later))).status).toBe(200);
    await laterEnqueued;
    expect(receiver.enqueued.map((enqueuedEvent) => enqueuedEvent.id)).toEqual([event.id, later.id]);
    expect(await storedCount(event.id)).toBe(1);
  });

  it('answers before the slow work finishes', async () => {
    let finishWork!: () => void;
    const work = new Promise<void>((resolve) => {
      finishWork = resolve;
    });
    const receiver = await startReceiver({}, () => work);
    const event = makeEvent();
    const response = await fetch(receiver.url, signed(event));
    expect(response.status).toBe(200);
    expect(receiver.enqueued).toHaveLength(1);
    finishWork();
  });

  it('a bad signature: 400 with the reason, nothing stored or enqueued', async () => {
    const receiver = await startReceiver();
    const event = makeEvent();
    const response = await fetch(receiver.url, signed(event, { secret: generateWebhookSecret() }));
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ error: 'invalid_webhook', reason: 'no_matching_signature' });
    expect(await storedCount(event.id)).toBe(0);
    expect(receiver.enqueued).toEqual([]);
  });

  it('a replayed (old) delivery and one without signature: 400 with their reasons, nothing stored', async () => {
    const receiver = await startReceiver();
    const event = makeEvent();
    const old = await fetch(receiver.url, signed(event, { timestamp: Math.floor(Date.now() / 1000) - 3_600 }));
    expect(old.status).toBe(400);
    expect(((await old.json()) as { reason: string }).reason).toBe('timestamp_outside_tolerance');

    const request = signed(event);
    delete (request.headers as Record<string, string>)[WEBHOOK_SIGNATURE_HEADER];
    delete (request.headers as Record<string, string>)[STANDARD_WEBHOOK_SIGNATURE_HEADER];
    const unsigned = await fetch(receiver.url, request);
    expect(unsigned.status).toBe(400);
    expect(((await unsigned.json()) as { reason: string }).reason).toBe('missing_header');
    expect(await storedCount(event.id)).toBe(0);
  });

  it('an oversized body with Content-Length: 413 without reading it, nothing stored', async () => {
    const receiver = await startReceiver();
    const event = { ...makeEvent(), data: { padding: 'x'.repeat(MAX_BODY_BYTES) } };
    const response = await fetch(receiver.url, signed(event));
    expect(response.status).toBe(413);
    expect(await response.json()).toEqual({ error: 'payload_too_large', limitBytes: MAX_BODY_BYTES });
    expect(await storedCount(event.id)).toBe(0);
  });

  it('an oversized chunked body (no Content-Length): 413 once it passes the limit', async () => {
    const receiver = await startReceiver();
    const event = { ...makeEvent(), data: { padding: 'x'.repeat(MAX_BODY_BYTES) } };
    const { headers, body } = signed(event);
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(receiver.url, { method: 'POST', headers }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      expect(req.getHeader('content-length')).toBeUndefined();
      // Two writes: the first fits, the second crosses the limit.
      req.write(body.slice(0, 1_000));
      req.end(body.slice(1_000));
    });
    expect(status).toBe(413);
    expect(await storedCount(event.id)).toBe(0);
  });

  it('a body exactly at the limit is accepted', async () => {
    const receiver = await startReceiver();
    const event = makeEvent();
    const bare = JSON.stringify({ ...event, data: { padding: '' } });
    const padded = { ...event, data: { padding: 'x'.repeat(MAX_BODY_BYTES - bare.length) } };
    expect(JSON.stringify(padded)).toHaveLength(MAX_BODY_BYTES);
    expect((await fetch(receiver.url, signed(padded))).status).toBe(200);
  });

  it('a store failure: 500 so the sender retries; the retry after recovery is stored and enqueued', async () => {
    // A real PostgreSQL failure: the store's table does not exist yet.
    const brokenStore = createPostgresEventStore({ pool, table: 'not_created_yet' });
    const receiver = await startReceiver({ store: brokenStore });
    const event = makeEvent();
    const response = await fetch(receiver.url, signed(event));
    expect(response.status).toBe(500);
    expect(await response.json()).toEqual({ error: 'internal_error' });
    expect(receiver.errors.map((error) => error.stage)).toEqual(['store']);
    expect(receiver.enqueued).toEqual([]);

    await brokenStore.createTable();
    const enqueued = receiver.nextEnqueued();
    expect((await fetch(receiver.url, signed(event))).status).toBe(200);
    expect((await enqueued).id).toBe(event.id);
    expect((await brokenStore.find(event.id))?.event).toEqual(event);
  });

  it('an enqueue that throws still answers 200 (the event is stored) and is reported', async () => {
    const receiver = await startReceiver({}, () => {
      throw new Error('queue full');
    });
    const event = makeEvent();
    expect((await fetch(receiver.url, signed(event))).status).toBe(200);
    await vi.waitFor(() => expect(receiver.errors.map((error) => error.stage)).toEqual(['enqueue']));
    expect(await store.listUnprocessed(1_000)).toContainEqual(event);
  });

  it('getSecrets picks the secrets per request; a throw from it is 500', async () => {
    const tenantSecret = generateWebhookSecret();
    const receiver = await startReceiver({
      secrets: undefined,
      getSecrets: async (req) => {
        if (req.url?.endsWith('/broken')) throw new Error('secrets manager down');
        return [tenantSecret];
      },
    });
    expect((await fetch(receiver.url, signed(makeEvent(), { secret: tenantSecret }))).status).toBe(200);
    expect((await fetch(receiver.url, signed(makeEvent()))).status).toBe(400);
    expect((await fetch(`${receiver.url}/broken`, signed(makeEvent(), { secret: tenantSecret }))).status).toBe(500);
    expect(receiver.errors.map((error) => error.stage)).toEqual(['secrets']);
  });

  it('other methods: 405 with Allow: POST', async () => {
    const receiver = await startReceiver();
    const response = await fetch(receiver.url);
    expect(response.status).toBe(405);
    expect(response.headers.get('allow')).toBe('POST');
  });

  it('refuses to be created without secrets or with a bad body limit', () => {
    expect(() => createWebhookHandler({ store, enqueue: () => {} } as unknown as WebhookHandlerOptions)).toThrow(
      TypeError,
    );
    expect(() => createWebhookHandler({ secrets: [SECRET], store, enqueue: () => {}, maxBodyBytes: 0 })).toThrow(
      TypeError,
    );
  });
});
