import { OUTBOX_NOTIFY_CHANNEL } from '@herald/contracts';
import type { Database } from '@herald/db';
import { type Kysely, sql } from 'kysely';
import pg from 'pg';
import type { Logger } from 'pino';

/** After the LISTEN connection fails, wait this long before connecting again. */
const RECONNECT_DELAY_MS = 1_000;

export interface OutboxListenerOptions {
  /** The PostgreSQL URL (the same as the pool's, so `current_schema()` matches the writers'). */
  databaseUrl: string;
  logger: Logger;
  /** Called on every outbox commit of this schema. */
  onEvent(): void;
}

export interface OutboxListener {
  start(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Listens for `insertOutboxEvent`'s NOTIFY (sent at commit, payload the schema), so the relay fans an
 * event out right after its commit instead of at the next poll. A dropped connection (a PostgreSQL
 * restart, `pg_terminate_backend`) is reopened; meanwhile the relay's poll is the safety net, and
 * nothing is lost either way (the outbox is the record).
 */
export function createOutboxListener(options: OutboxListenerOptions): OutboxListener {
  const { logger } = options;
  let client: pg.Client | undefined;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;

  async function connect(): Promise<void> {
    if (stopped) return;
    const next = new pg.Client({ connectionString: options.databaseUrl, application_name: 'herald-outbox-listener' });
    const retry = () => {
      if (stopped || client !== next) return;
      client = undefined;
      void next.end().catch(() => {});
      timer = setTimeout(() => void connect(), RECONNECT_DELAY_MS);
    };
    client = next;
    next.on('error', (error) => {
      logger.warn({ err: error }, 'outbox listener connection failed; reconnecting');
      retry();
    });
    next.on('end', retry);
    try {
      await next.connect();
      const { rows } = await next.query<{ schema: string }>('select current_schema() as schema');
      const schema = rows[0]?.schema ?? 'public';
      next.on('notification', (message) => {
        if (message.payload === schema) options.onEvent();
      });
      await next.query(`listen ${OUTBOX_NOTIFY_CHANNEL}`);
      // Events committed while not listening are found by this wake-up (and the relay's poll).
      options.onEvent();
    } catch (error) {
      logger.warn({ err: error }, 'outbox listener could not connect; retrying');
      retry();
    }
  }

  return {
    async start() {
      stopped = false;
      await connect();
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      const current = client;
      client = undefined;
      await current?.end().catch(() => {});
    },
  };
}

/** What an embedded database (PGlite) offers for notifications on its own connection. */
interface InProcessNotifier {
  listen(channel: string, callback: (payload: string) => void): Promise<() => Promise<void>>;
}

/**
 * Embedded mode (PGlite): the writers and the dispatcher share one in-process database, so the
 * `pg_notify` that every outbox write sends at commit (publishPost's statement, `insertOutboxEvent`)
 * arrives in this very process. Listens for it on the database's own connection, so the relay fans an
 * event out right after its commit instead of at the next poll.
 * @returns undefined when the database is not one that delivers notifications in process (a pool of
 *   PostgreSQL connections: use {@link createOutboxListener})
 */
export async function listenInProcess(db: Kysely<Database>, onEvent: () => void): Promise<OutboxListener | undefined> {
  const client = await db
    .getExecutor()
    .provideConnection(async (connection) => (connection as { client?: unknown }).client);
  if (!isInProcessNotifier(client)) return undefined;
  const { rows } = await sql<{ schema: string }>`select current_schema() as schema`.execute(db);
  const schema = rows[0]?.schema ?? 'public';
  let unlisten: (() => Promise<void>) | undefined;
  return {
    async start() {
      unlisten ??= await client.listen(OUTBOX_NOTIFY_CHANNEL, (payload) => {
        if (payload === schema) onEvent();
      });
      onEvent();
    },
    async stop() {
      const current = unlisten;
      unlisten = undefined;
      await current?.().catch(() => {});
    },
  };
}

function isInProcessNotifier(client: unknown): client is InProcessNotifier {
  return (
    typeof client === 'object' &&
    client !== null &&
    typeof (client as { listen?: unknown }).listen === 'function' &&
    !(client instanceof pg.Client)
  );
}
