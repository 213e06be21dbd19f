import type { Database, SecretKeyring } from '@herald/db';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { createDispatcher, type Dispatcher, type DispatcherSettings } from './dispatcher.js';
import { createDatabaseQueue } from './queue/database-queue.js';

/** Embedded mode runs on one process and a small database: less work in hand than a cluster dispatcher. */
const EMBEDDED_CONCURRENCY = 20;
/** Due retries are looked for this often; new outbox events wake the relay at commit (in-process notification), this poll is only their safety net. */
const EMBEDDED_POLL_INTERVAL_MS = 250;
/**
 * Publishes wake the relay (`notifyOutbox`) at most this often while they keep coming, so one fan-out
 * statement, one enqueue and one claim take every event committed in the meantime instead of one each
 * (on PGlite each statement costs the API ~0.2–0.6 ms of CPU). The first wake-up after a quiet
 * spell is immediate; a webhook waits at most this much longer for its fan-out.
 */
export const EMBEDDED_FAN_OUT_INTERVAL_MS = 20;

export interface EmbeddedDispatcherDeps {
  db: Kysely<Database>;
  logger: Logger;
  settings: DispatcherSettings;
  /** Opens the endpoints' sealed signing secrets (`HERALD_ENCRYPTION_KEYS`, or embedded mode's generated key). */
  keyring: SecretKeyring;
  /** Where the metrics are registered (the API's registry, so its `/metrics` shows them). */
  registry?: Registry;
  /** PostgreSQL URL in single mode (LISTEN for outbox commits); absent for the embedded PGlite. */
  databaseUrl?: string;
}

/**
 * The dispatcher for a process without Redis (embedded mode): the very same dispatcher, on the
 * database-backed queue, running inside the API process.
 */
export function createEmbeddedDispatcher(deps: EmbeddedDispatcherDeps): Dispatcher {
  const dispatcher = createDispatcher({
    db: deps.db,
    queue: createDatabaseQueue({ db: deps.db }),
    logger: deps.logger.child({ component: 'webhook-dispatcher' }),
    registry: deps.registry,
    databaseUrl: deps.databaseUrl,
    keyring: deps.keyring,
    settings: { concurrency: EMBEDDED_CONCURRENCY, pollIntervalMs: EMBEDDED_POLL_INTERVAL_MS, ...deps.settings },
  });
  return { ...dispatcher, notifyOutbox: throttleWakeUps(dispatcher.notifyOutbox, EMBEDDED_FAN_OUT_INTERVAL_MS) };
}

/**
 * `wake`, called at once when it last ran at least `intervalMs` ago, else once when that much time has
 * passed (calls in between share that one). The timer does not keep the process alive: a wake-up lost to
 * shutdown is found by the relay's poll at the next start.
 */
export function throttleWakeUps(wake: () => void, intervalMs: number): () => void {
  let last = Number.NEGATIVE_INFINITY;
  let timer: NodeJS.Timeout | undefined;
  const fire = () => {
    timer = undefined;
    last = performance.now();
    wake();
  };
  return () => {
    if (timer) return;
    const wait = last + intervalMs - performance.now();
    if (wait <= 0) return fire();
    timer = setTimeout(fire, wait);
    timer.unref();
  };
}
