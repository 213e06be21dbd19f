/**
 * FIFO against unordered: deliveries per second to one endpoint of each kind, one after the other in one
 * run, to the same local receiver that answers 200 at once. Real PostgreSQL and Redis (DATABASE_URL /
 * REDIS_URL, the local servers by default), its own schema and Redis key prefix, dropped afterwards.
 *
 *   pnpm exec tsx bench/micro/webhook-fifo.ts
 *   BENCH_EVENTS=5000 pnpm exec tsx bench/micro/webhook-fifo.ts
 *
 * For each kind the outbox is filled first, then a dispatcher starts; the clock runs from its start
 * until the receiver has seen every event once. A FIFO endpoint has one POST in flight at a time, so
 * its rate is bounded by the round trip to the receiver; the line's next deliveries are taken while the
 * last ones are recorded, so it does not wait on the database between POSTs. The FIFO run also checks
 * that the receiver saw the events in order.
 */
import { randomUUID } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import { createDispatcherHarness, startTestReceiver } from '@herald/webhook-engine/testing';
import { benchOutboxRows } from '../src/outbox-rows.js';
import { createBenchSchema } from '../src/schema.js';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 2_000);
const ENDPOINT_CONCURRENCY = Number(process.env.WEBHOOK_ENDPOINT_CONCURRENCY ?? 10);
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const INSERT_BATCH = 1_000;
/** Each run stops after this long, delivered or not. */
const RUN_LIMIT_MS = 300_000;

const harness = await createDispatcherHarness(DATABASE_URL, REDIS_URL, await createBenchSchema(DATABASE_URL));
const receiver = await startTestReceiver(() => ({ status: 200 }));
try {
  const results = [];
  for (const ordering of ['UNORDERED', 'FIFO'] as const) {
    const orgId = `org-bench-${ordering.toLowerCase()}-${randomUUID()}`;
    const path = `/bench-${ordering.toLowerCase()}`;
    const endpoint = await harness.createEndpoint(orgId, receiver.url(path));
    await harness.db.updateTable('webhook_endpoints').set({ ordering }).where('id', '=', endpoint.id).execute();
    const events: string[] = [];
    for (let offset = 0; offset < EVENTS; offset += INSERT_BATCH) {
      const rows = benchOutboxRows(orgId, offset, Math.min(EVENTS, offset + INSERT_BATCH));
      await harness.db.insertInto('webhook_outbox').values(rows).execute();
      events.push(...rows.map((row) => row.id));
    }
    const started = performance.now();
    const dispatcher = await harness.startDispatcher({
      timeoutMs: 10_000,
      retryBaseMs: 5_000,
      retryHorizonMs: 3 * 24 * 3_600_000,
      pollIntervalMs: 500,
      endpointConcurrency: ENDPOINT_CONCURRENCY,
      batchSize: 200,
    });
    const seen = new Set<string>();
    const order: string[] = [];
    let counted = 0;
    await receiver.waitFor((requests) => {
      for (; counted < requests.length; counted++) {
        const request = requests[counted]!;
        if (request.path !== path) continue;
        const id = request.headers['x-webhook-id'] ?? '';
        if (!seen.has(id)) order.push(id);
        seen.add(id);
      }
      return seen.size >= EVENTS;
    }, RUN_LIMIT_MS);
    const seconds = (performance.now() - started) / 1_000;
    await dispatcher.stop();
    results.push({
      ordering,
      deliveries: EVENTS,
      seconds: Number(seconds.toFixed(2)),
      deliveriesPerSecond: Math.round(EVENTS / seconds),
      inPublishOrder: order.every((id, index) => id === events[index]),
    });
  }
  process.stdout.write(
    `${JSON.stringify({
      benchmark: 'webhook-fifo',
      events: EVENTS,
      endpointConcurrency: ENDPOINT_CONCURRENCY,
      results,
      cpus: availableParallelism(),
      node: process.version,
    })}\n`,
  );
} finally {
  await receiver.close();
  await harness.close();
}
