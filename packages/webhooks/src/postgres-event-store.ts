import type { Pool } from 'pg';
import type { WebhookEvent } from './webhook-event.js';
import type { WebhookEventStore } from './webhook-event-store.js';

/** Table the store uses unless told otherwise. */
export const DEFAULT_WEBHOOK_EVENTS_TABLE = 'webhook_events';
/** How many unprocessed events {@link PostgresEventStore.listUnprocessed} returns unless told otherwise. */
const DEFAULT_UNPROCESSED_LIMIT = 100;
/** A plain or schema-qualified SQL identifier; anything else is refused rather than quoted. */
const TABLE_NAME_PATTERN = /^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$/;

export interface PostgresEventStoreOptions {
  /** A `pg` pool; the store never ends it (the caller owns it). */
  pool: Pool;
  /**
   * Table name, optionally schema-qualified, lower-case letters, digits and `_` only.
   * @default 'webhook_events'
   * @throws TypeError at creation for any other name.
   */
  table?: string;
}

/** An event as stored, with the receiver's own bookkeeping. */
export interface StoredWebhookEvent {
  event: WebhookEvent;
  receivedAt: Date;
  processedAt: Date | null;
}

/**
 * A {@link WebhookEventStore} on PostgreSQL, plus what a background worker needs to never lose an
 * event: the stored row is the durable record of work to do, `listUnprocessed` finds what a crash
 * left behind, `markProcessed` closes it.
 */
export interface PostgresEventStore extends WebhookEventStore {
  /** Creates the table if it does not exist. Run it once at start (it is idempotent). */
  createTable(): Promise<void>;
  /** Stored events not yet marked processed, oldest first. @default limit 100 */
  listUnprocessed(limit?: number): Promise<WebhookEvent[]>;
  /** Records that the slow work for this event is done; a no-op for an unknown id. */
  markProcessed(eventId: string): Promise<void>;
  /** The stored row for one event id, or `undefined`. */
  find(eventId: string): Promise<StoredWebhookEvent | undefined>;
}

/**
 * Stores events in one table keyed by event id. `recordIfNew` is a single
 * `insert … on conflict (id) do nothing`: it is durable when it returns, and PostgreSQL makes
 * concurrent deliveries of one event wait for each other so that exactly one is told "new".
 */
export function createPostgresEventStore(options: PostgresEventStoreOptions): PostgresEventStore {
  const { pool } = options;
  const table = options.table ?? DEFAULT_WEBHOOK_EVENTS_TABLE;
  if (!TABLE_NAME_PATTERN.test(table)) {
    throw new TypeError(`createPostgresEventStore: table must be a lower-case SQL identifier, got "${table}"`);
  }
  const quoted = table
    .split('.')
    .map((part) => `"${part}"`)
    .join('.');

  return {
    async createTable() {
      await pool.query(`
        create table if not exists ${quoted} (
          id text primary key,
          type text not null,
          payload jsonb not null,
          received_at timestamptz not null default now(),
          processed_at timestamptz
        )`);
    },

    async recordIfNew(event) {
      const result = await pool.query(
        `insert into ${quoted} (id, type, payload) values ($1, $2, $3::jsonb) on conflict (id) do nothing`,
        [event.id, event.type, JSON.stringify(event)],
      );
      return result.rowCount === 1;
    },

    async listUnprocessed(limit = DEFAULT_UNPROCESSED_LIMIT) {
      const result = await pool.query<{ payload: WebhookEvent }>(
        `select payload from ${quoted} where processed_at is null order by received_at, id limit $1`,
        [limit],
      );
      return result.rows.map((row) => row.payload);
    },

    async markProcessed(eventId) {
      await pool.query(`update ${quoted} set processed_at = now() where id = $1 and processed_at is null`, [eventId]);
    },

    async find(eventId) {
      const result = await pool.query<{ payload: WebhookEvent; received_at: Date; processed_at: Date | null }>(
        `select payload, received_at, processed_at from ${quoted} where id = $1`,
        [eventId],
      );
      const row = result.rows[0];
      return row && { event: row.payload, receivedAt: row.received_at, processedAt: row.processed_at };
    },
  };
}
