/**
 * How many webhook events per second one dispatcher delivers to a local receiver that answers 200 at
 * once. Real PostgreSQL and Redis (DATABASE_URL / REDIS_URL, the local servers by default), its own
 * schema and Redis key prefix, dropped afterwards.
 *
 *   pnpm exec tsx bench/micro/webhook-dispatch.ts
 *   BENCH_EVENTS=20000 BENCH_ENDPOINTS=4 WEBHOOK_ENDPOINT_CONCURRENCY=20 pnpm exec tsx bench/micro/webhook-dispatch.ts
 *
 * The outbox is filled first, then the dispatcher starts; the clock runs from its start until the
 * receiver has seen every event once. That is the whole path: relay → stream → fan-out → scheduler →
 * stream → signed POST → recorded attempt.
 */
import { randomUUID } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import { createDispatcherHarness, startTestReceiver } from '@herald/webhook-engine/testing';
import { benchOutboxRows } from '../src/outbox-rows.js';
import { createBenchSchema } from '../src/schema.js';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 5_000);
const ENDPOINTS = Number(process.env.BENCH_ENDPOINTS ?? 1);
const ENDPOINT_CONCURRENCY = Number(process.env.WEBHOOK_ENDPOINT_CONCURRENCY ?? 10);
const CONCURRENCY = Number(process.env.WEBHOOK_CONCURRENCY ?? 100);
/** Dispatchers sharing the work, in this process. */
const DISPATCHERS = Number(process.env.BENCH_DISPATCHERS ?? 1);
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const INSERT_BATCH = 1_000;

const harness = await createDispatcherHarness(DATABASE_URL, REDIS_URL, await createBenchSchema(DATABASE_URL));
const receiver = await startTestReceiver(() => ({ status: 200 }));
try {
  const orgId = `org-bench-${randomUUID()}`;
  for (let i = 0; i < ENDPOINTS; i++) await harness.createEndpoint(orgId, receiver.url(`/bench-${i}`));
  for (let offset = 0; offset < EVENTS; offset += INSERT_BATCH) {
    const rows = benchOutboxRows(orgId, offset, Math.min(EVENTS, offset + INSERT_BATCH));
    await harness.db.insertInto('webhook_outbox').values(rows).execute();
  }
  const deliveries = EVENTS * ENDPOINTS;

  const started = performance.now();
  const dispatchers = await Promise.all(
    Array.from({ length: DISPATCHERS }, () =>
      harness.startDispatcher({
        timeoutMs: 10_000,
        retryBaseMs: 5_000,
        retryHorizonMs: 3 * 24 * 3_600_000,
        pollIntervalMs: 500,
        concurrency: CONCURRENCY,
        endpointConcurrency: ENDPOINT_CONCURRENCY,
        batchSize: 200,
      }),
    ),
  );
  const seen = new Set<string>();
  let counted = 0;
  await receiver.waitFor((requests) => {
    for (; counted < requests.length; counted++) {
      const request = requests[counted]!;
      seen.add(`${request.path} ${request.headers['x-webhook-id']}`);
    }
    return seen.size >= deliveries;
  }, 600_000);
  const seconds = (performance.now() - started) / 1_000;
  await Promise.all(dispatchers.map((dispatcher) => dispatcher.stop()));

  const rate = deliveries / seconds;
  process.stdout.write(
    `${JSON.stringify({
      benchmark: 'webhook-dispatch',
      events: EVENTS,
      endpoints: ENDPOINTS,
      deliveries,
      duplicates: receiver.requests.length - deliveries,
      seconds: Number(seconds.toFixed(2)),
      deliveriesPerSecond: Math.round(rate),
      dispatchers: DISPATCHERS,
      concurrency: CONCURRENCY,
      endpointConcurrency: ENDPOINT_CONCURRENCY,
      cpus: availableParallelism(),
      node: process.version,
    })}\n`,
  );
} finally {
  await receiver.close();
  await harness.close();
}
