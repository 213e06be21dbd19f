import type { Database } from '@herald/db';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { createDispatcher, type Dispatcher, type DispatcherSettings } from './dispatcher.js';
import { createDatabaseQueue } from './queue/database-queue.js';

/** Embedded mode runs on one process and a small database: less work in hand than a cluster dispatcher. */
const EMBEDDED_CONCURRENCY = 20;
/** Due retries are looked for this often; new outbox events wake the relay at commit (in-process notification), this poll is only their safety net. */
const EMBEDDED_POLL_INTERVAL_MS = 250;

export interface EmbeddedDispatcherDeps {
  db: Kysely<Database>;
  logger: Logger;
  settings: DispatcherSettings;
  /** Where the metrics are registered (the API's registry, so its `/metrics` shows them). */
  registry?: Registry;
  /** PostgreSQL URL in single mode (LISTEN for outbox commits); absent for the embedded PGlite. */
  databaseUrl?: string;
}

/**
 * The dispatcher for a process without Redis (embedded mode, SPEC §2): the very same dispatcher, on the
 * database-backed queue, running inside the API process.
 */
export function createEmbeddedDispatcher(deps: EmbeddedDispatcherDeps): Dispatcher {
  return createDispatcher({
    db: deps.db,
    queue: createDatabaseQueue({ db: deps.db }),
    logger: deps.logger.child({ component: 'webhook-dispatcher' }),
    registry: deps.registry,
    databaseUrl: deps.databaseUrl,
    settings: { concurrency: EMBEDDED_CONCURRENCY, pollIntervalMs: EMBEDDED_POLL_INTERVAL_MS, ...deps.settings },
  });
}
