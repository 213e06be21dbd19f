/**
 * A complete webhook receiver for Herald deliveries:
 *
 *   POST /webhooks → verify (400 if refused) → store in PostgreSQL, deduplicated by event id
 *   (500 if that fails, so Herald retries) → 200 → the slow work runs in the background.
 *
 * The table is the durable queue: the in-memory queue below only says "there is work now". Whatever
 * a crash leaves unprocessed is found again at start (and by a periodic sweep) through
 * `listUnprocessed`, so an event acknowledged with 200 is never lost, and a retried delivery of an
 * event already stored is answered 200 without being processed twice.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test WEBHOOK_SECRETS=whsec_… \
 *     pnpm --filter @herald/webhooks example:receiver
 *
 * WEBHOOK_SECRETS is comma-separated: list the new and the old secret while rotating.
 * PORT (default 3000) and HOST (default 127.0.0.1) set the listen address.
 */
import { createServer } from 'node:http';
import { createPostgresEventStore, createWebhookHandler, type WebhookEvent } from '@herald/webhooks';
import pg from 'pg';

const WEBHOOK_PATH = '/webhooks';
/** How often the worker looks for stored events that no enqueue announced (a crash, a lost wake-up). */
const SWEEP_INTERVAL_MS = 30_000;
/** Events fetched from the table per sweep. */
const SWEEP_BATCH_SIZE = 100;

const databaseUrl = process.env.DATABASE_URL;
const secrets = (process.env.WEBHOOK_SECRETS ?? '')
  .split(',')
  .map((secret) => secret.trim())
  .filter(Boolean);
if (!databaseUrl || secrets.length === 0) {
  console.error('Set DATABASE_URL and WEBHOOK_SECRETS (comma-separated whsec_… secrets).');
  process.exit(1);
}
const port = Number(process.env.PORT ?? 3000);
const host = process.env.HOST ?? '127.0.0.1';

const pool = new pg.Pool({ connectionString: databaseUrl });
const store = createPostgresEventStore({ pool });
await store.createTable();

/** The slow work: here it only logs; a real receiver would call other services, send mail, … */
async function processEvent(event: WebhookEvent): Promise<void> {
  console.log(`processing ${event.type} ${event.id}`, JSON.stringify(event.data));
}

const pending: WebhookEvent[] = [];
let running: Promise<void> | undefined;

/** Drains the in-memory queue one event at a time; marks each processed only once its work is done. */
function wake(): Promise<void> {
  running ??= (async () => {
    for (let event = pending.shift(); event; event = pending.shift()) {
      try {
        await processEvent(event);
        await store.markProcessed(event.id);
      } catch (error) {
        // Left unprocessed in the table: the next sweep tries again.
        console.error(`processing ${event.id} failed`, error);
      }
    }
  })().finally(() => {
    running = undefined;
  });
  return running;
}

async function sweep(): Promise<void> {
  const queued = new Set(pending.map((event) => event.id));
  for (const event of await store.listUnprocessed(SWEEP_BATCH_SIZE)) {
    if (!queued.has(event.id)) pending.push(event);
  }
  await wake();
}

const handler = createWebhookHandler({
  secrets,
  store,
  enqueue: (event) => {
    pending.push(event);
    void wake();
  },
  onError: (error, stage) => console.error(`webhook ${stage} failed`, error),
});

const server = createServer((req, res) => {
  if (new URL(req.url ?? '/', 'http://receiver').pathname !== WEBHOOK_PATH) {
    res.writeHead(404).end();
    return;
  }
  void handler(req, res);
});

await sweep();
const sweeper = setInterval(
  () => void sweep().catch((error) => console.error('sweep failed', error)),
  SWEEP_INTERVAL_MS,
);
server.listen(port, host, () => console.log(`receiving webhooks on http://${host}:${port}${WEBHOOK_PATH}`));

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, async () => {
    clearInterval(sweeper);
    server.close();
    await running;
    await pool.end();
    process.exit(0);
  });
}
