import { mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { PGliteDialect } from 'kysely-pglite-dialect';
import pg from 'pg';
import type { Database } from './database.js';

/** Upper bound on pooled PostgreSQL connections per process. */
const DEFAULT_POOL_MAX = 10;
/** A query waiting this long for a free pooled connection fails instead of queueing forever. */
const POOL_CONNECT_TIMEOUT_MS = 5_000;
/** Idle pooled connections are closed after this long. */
const POOL_IDLE_TIMEOUT_MS = 30_000;

export type DatabaseConfig =
  /** PostgreSQL server; each query takes a pooled connection and gives it back at once. */
  | { kind: 'postgres'; url: string; poolMax?: number }
  /**
   * Embedded PostgreSQL (PGlite, WebAssembly) stored in `dataDir`, or in memory for `memory://`.
   * One process only: two processes must never open the same directory.
   */
  | { kind: 'embedded'; dataDir: string };

export interface HeraldDatabase {
  db: Kysely<Database>;
  kind: DatabaseConfig['kind'];
  /** Resolves when the database answers a trivial query; rejects otherwise. Used by `/readiness`. */
  ping(): Promise<void>;
  /** Closes the pool (or the embedded instance). Idempotent. */
  close(): Promise<void>;
}

/** Opens the configured database. Does not migrate; call `migrateToLatest` next. */
export async function createDatabase(config: DatabaseConfig): Promise<HeraldDatabase> {
  const embedded = config.kind === 'embedded' ? await openEmbedded(config.dataDir) : undefined;
  const dialect =
    config.kind === 'postgres'
      ? new PostgresDialect({
          pool: new pg.Pool({
            connectionString: config.url,
            max: config.poolMax ?? DEFAULT_POOL_MAX,
            connectionTimeoutMillis: POOL_CONNECT_TIMEOUT_MS,
            idleTimeoutMillis: POOL_IDLE_TIMEOUT_MS,
            application_name: 'herald',
          }),
        })
      : new PGliteDialect(embedded!);
  const db = new Kysely<Database>({ dialect });
  let closed: Promise<void> | undefined;
  return {
    db,
    kind: config.kind,
    async ping() {
      await sql`select 1`.execute(db);
    },
    close() {
      closed ??= (async () => {
        // PGlite hangs (spinning) when closed while a query runs, and background work (the in-process
        // webhook dispatcher) may have one in flight at any moment. Closing it while holding its single
        // connection waits for that query; queries queued behind it then fail with "PGlite is closed".
        if (embedded) {
          await db.connection().execute(() => embedded.close());
          // Kysely's destroy closes PGlite again, which now throws "PGlite is closed".
          await db.destroy().catch(() => {});
        } else {
          await db.destroy();
        }
      })();
      return closed;
    },
  };
}

async function openEmbedded(dataDir: string): Promise<PGlite> {
  if (dataDir.startsWith('memory://')) return PGlite.create(dataDir);
  mkdirSync(dataDir, { recursive: true });
  return PGlite.create(dataDir);
}
