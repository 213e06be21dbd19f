import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
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

/**
 * PGlite's shared buffers. PostgreSQL's default (128MB) lives in the WebAssembly memory of the API
 * process and never shrinks; a laptop's embedded database is small, and 16MB keeps the idle process
 * about 115 MB smaller (issue 14) with no measurable cost to Herald's queries.
 */
const EMBEDDED_SHARED_BUFFERS = '16MB';
const EMBEDDED_START_PARAMS = [...PGlite.defaultStartParams, '-c', `shared_buffers=${EMBEDDED_SHARED_BUFFERS}`];

async function openEmbedded(dataDir: string): Promise<PGlite> {
  if (dataDir.startsWith('memory://')) return PGlite.create(dataDir, { startParams: EMBEDDED_START_PARAMS });
  mkdirSync(dataDir, { recursive: true });
  if (!existsSync(join(dataDir, 'PG_VERSION'))) await initEmbeddedInWorker(dataDir);
  return PGlite.create(dataDir, { startParams: EMBEDDED_START_PARAMS });
}

/**
 * Creating a data directory (initdb) grows PGlite's WebAssembly memory to ~700 MB, which a process
 * never gives back. Done in a worker thread, that memory goes away with the worker, and the API opens
 * the finished directory at its normal size. Where a worker cannot run this TypeScript (a bundle, a
 * test runner), the directory is created in this process as before.
 */
async function initEmbeddedInWorker(dataDir: string): Promise<void> {
  try {
    const worker = new Worker(new URL('./init-embedded-worker.mjs', import.meta.url), {
      workerData: { dataDir, startParams: EMBEDDED_START_PARAMS },
    });
    await new Promise<void>((resolve, reject) => {
      worker.once('error', reject);
      worker.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`init worker exited with ${code}`))));
    });
  } catch {
    // Not fatal: PGlite.create below initialises the directory itself.
  }
}
