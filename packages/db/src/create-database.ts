import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, PostgresDialect, type PostgresPool, sql } from 'kysely';
import { PGliteDialect } from 'kysely-pglite-dialect';
import pg from 'pg';
import { lockDataDirectory } from './data-directory-lock.js';
import type { Database } from './database.js';
import { createDialectPool } from './dialect-pool.js';
import { registerDirectReads } from './direct-reads.js';
import { copyEmbeddedTemplate } from './embedded-template.js';
import { migrationProvider } from './migrations/index.js';
import { withPglitePreparedStatements } from './pglite-prepared-statements.js';

/** Upper bound on pooled PostgreSQL connections per process. */
export const DEFAULT_POOL_MAX = 10;
/**
 * A query waiting this long for a new connection, or for a free pooled one, fails (and is answered as
 * "service unavailable") instead of queueing forever while the server is gone.
 */
export const POOL_CONNECT_TIMEOUT_MS = 5_000;
/** Idle pooled connections are closed after this long. */
const POOL_IDLE_TIMEOUT_MS = 30_000;
/** TCP keep-alive probes start after this much silence, so a connection to a vanished host is noticed. */
const TCP_KEEPALIVE_INITIAL_DELAY_MS = 10_000;
/**
 * A query unanswered for this long fails as "database unavailable" (see query-timeout.ts) instead of
 * hanging while a frozen server keeps its connections open. Generous: no request of Herald's takes
 * seconds on a healthy server.
 */
export const DEFAULT_QUERY_TIMEOUT_MS = 30_000;
/**
 * `ping` (the readiness probe) gives up after this long: a hung database is an unready one. Under the
 * 2 s after which Kubernetes gives up on the probe (k8s/base), so a hung database gets a 503 naming it.
 */
const PING_TIMEOUT_MS = 1_000;

export type DatabaseConfig =
  /** PostgreSQL server; each query takes a pooled connection and gives it back at once. */
  | {
      kind: 'postgres';
      url: string;
      poolMax?: number;
      /**
       * Client-side deadline per query in ms (0: none); migrations are exempt.
       * @default DEFAULT_QUERY_TIMEOUT_MS
       */
      queryTimeoutMs?: number;
      /**
       * Send statements with parameters as named prepared statements (see prepared-statements.ts). Keep
       * it off behind a PgBouncer in transaction mode older than 1.21, which can't keep them.
       * @default false (the API turns it on: DATABASE_PREPARED_STATEMENTS)
       */
      preparedStatements?: boolean;
    }
  /**
   * Embedded PostgreSQL (PGlite, WebAssembly) stored in `dataDir`, or in memory for `memory://`.
   * One process only: opening takes the directory's lock (data-directory-lock.ts) and fails with
   * `DataDirectoryInUseError` while another live process holds it; `close` releases it.
   */
  | {
      kind: 'embedded';
      dataDir: string;
      /**
       * A pre-initialised, migrated data directory (see embedded-template.ts) copied into `dataDir` when
       * that does not hold a database yet; null: none. A missing, stale or damaged template is skipped
       * (reported through `onEmbeddedCreated`) and the directory is created by initdb as without one.
       * @default DEFAULT_EMBEDDED_TEMPLATE: `embedded-template/` beside this module (where `pnpm start`'s
       *   build puts it, next to the API bundle)
       */
      template?: string | null;
    };

export interface DatabaseOptions {
  /**
   * Called with every error a connection reports outside a query: a backend terminated by
   * `pg_terminate_backend` or a failover, a server restart, a network drop. Such a connection is
   * discarded and the next query opens a new one; the error never ends the process.
   * @default one line on stderr
   */
  onConnectionError?: (error: Error) => void;
  /**
   * Called once when an embedded data directory is created: copied from the template, or by initdb
   * (with why the template was not used). Not called for an existing directory or `memory://`.
   * @default nothing
   */
  onEmbeddedCreated?: (created: EmbeddedCreation) => void;
  /**
   * Called once when the embedded database's prepared statements are off because PGlite's internals are
   * not what pglite-prepared-statements.ts was written for (statements then run unnamed, as PGlite's
   * own `query` runs them). @default nothing
   */
  onFastPathFallback?: (path: 'pglite_statements', reason: string) => void;
}

/** How a new embedded data directory came to be, and how long that took (migrations excluded). */
export type EmbeddedCreation = { from: 'template'; ms: number } | { from: 'initdb'; reason: string; ms: number };

/** Where `createDatabase` looks for the embedded template by default: beside this module (or the bundle). */
export const DEFAULT_EMBEDDED_TEMPLATE = fileURLToPath(new URL('./embedded-template', import.meta.url));

export interface HeraldDatabase {
  db: Kysely<Database>;
  kind: DatabaseConfig['kind'];
  /**
   * Resolves when the database answers a trivial query within 2 s; rejects otherwise (unreachable,
   * terminated, hung). Used by `/readiness`.
   */
  ping(): Promise<void>;
  /** Closes the pool (or the embedded instance). Idempotent. */
  close(): Promise<void>;
}

/**
 * Opens the configured database. Does not migrate; call `migrateToLatest` next.
 *
 * PostgreSQL outages (failover, restart, `pg_terminate_backend`) never end the process: every pooled
 * connection has an `'error'` listener, idle or checked out (node-postgres re-emits an idle client's
 * error on the pool and a checked-out client's on the client, and an unheard `'error'` event throws).
 * Queries meanwhile fail within {@link POOL_CONNECT_TIMEOUT_MS} with an error that
 * {@link isDatabaseUnavailableError} recognises, and the pool reconnects by itself once the server is back.
 */
export async function createDatabase(config: DatabaseConfig, options: DatabaseOptions = {}): Promise<HeraldDatabase> {
  const onConnectionError = options.onConnectionError ?? logConnectionError;
  // Embedded: in process, no pooler in between, so statements with parameters are always prepared.
  const lock =
    config.kind === 'embedded' && !config.dataDir.startsWith('memory://')
      ? lockDataDirectory(config.dataDir)
      : undefined;
  let embedded: PGlite | undefined;
  try {
    embedded =
      config.kind === 'embedded'
        ? withPglitePreparedStatements(await openEmbedded(config, options.onEmbeddedCreated), {
            onFallback: (reason) => options.onFastPathFallback?.('pglite_statements', reason),
          })
        : undefined;
  } catch (error) {
    lock?.release();
    throw error;
  }
  let dialect: PostgresDialect | PGliteDialect;
  let dialectPool: PostgresPool | undefined;
  if (config.kind === 'postgres') {
    const pool = new pg.Pool({
      connectionString: config.url,
      max: config.poolMax ?? DEFAULT_POOL_MAX,
      connectionTimeoutMillis: POOL_CONNECT_TIMEOUT_MS,
      idleTimeoutMillis: POOL_IDLE_TIMEOUT_MS,
      keepAlive: true,
      keepAliveInitialDelayMillis: TCP_KEEPALIVE_INITIAL_DELAY_MS,
      application_name: 'herald',
    });
    pool.on('error', onConnectionError);
    pool.on('connect', (client) => client.on('error', onConnectionError));
    dialectPool = createDialectPool(pool, {
      queryTimeoutMs: config.queryTimeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS,
      preparedStatements: config.preparedStatements ?? false,
    });
    dialect = new PostgresDialect({ pool: dialectPool });
  } else {
    dialect = new PGliteDialect(embedded!);
  }
  const db = new Kysely<Database>({ dialect });
  if (dialectPool) registerDirectReads(db, dialectPool);
  let closed: Promise<void> | undefined;
  return {
    db,
    kind: config.kind,
    async ping() {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new DatabasePingTimeoutError(PING_TIMEOUT_MS)), PING_TIMEOUT_MS);
      });
      try {
        await Promise.race([sql`select 1`.execute(db), timeout]);
      } finally {
        clearTimeout(timer);
      }
    },
    close() {
      closed ??= (async () => {
        // PGlite hangs (spinning) when closed while a query runs, and background work (the in-process
        // webhook dispatcher) may have one in flight at any moment. Closing it while holding its single
        // connection waits for that query; queries queued behind it then fail with "PGlite is closed".
        if (embedded) {
          const pglite = embedded;
          try {
            await db.connection().execute(() => pglite.close());
            // Kysely's destroy closes PGlite again, which now throws "PGlite is closed".
            await db.destroy().catch(() => {});
          } finally {
            lock?.release();
          }
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
 * about 115 MB smaller with no measurable cost to Herald's queries.
 */
const EMBEDDED_SHARED_BUFFERS = '16MB';
const EMBEDDED_START_PARAMS = [...PGlite.defaultStartParams, '-c', `shared_buffers=${EMBEDDED_SHARED_BUFFERS}`];

async function openEmbedded(
  config: Extract<DatabaseConfig, { kind: 'embedded' }>,
  onCreated: DatabaseOptions['onEmbeddedCreated'],
): Promise<PGlite> {
  const { dataDir } = config;
  if (dataDir.startsWith('memory://')) return PGlite.create(dataDir, { startParams: EMBEDDED_START_PARAMS });
  if (existsSync(join(dataDir, 'PG_VERSION'))) return PGlite.create(dataDir, { startParams: EMBEDDED_START_PARAMS });
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const template = config.template === undefined ? DEFAULT_EMBEDDED_TEMPLATE : config.template;
  const copy =
    template === null
      ? { copied: false as const, reason: 'no template configured' }
      : copyEmbeddedTemplate(template, dataDir, Object.keys(await migrationProvider.getMigrations()));
  let reason: string;
  if (copy.copied) {
    try {
      const opened = await PGlite.create(dataDir, { startParams: EMBEDDED_START_PARAMS });
      onCreated?.({ from: 'template', ms: elapsed() });
      return opened;
    } catch (error) {
      // A damaged copy aborts PGlite's start (seen: "Aborted()", "PGlite failed to initialize properly").
      // The directory is the copy made just now: nothing else is lost by removing it.
      reason = `the template's copy does not open: ${(error as Error).message}`;
      rmSync(dataDir, { recursive: true, force: true });
    }
  } else {
    reason = copy.reason;
  }
  mkdirSync(dataDir, { recursive: true });
  await initEmbeddedInWorker(dataDir);
  const opened = await PGlite.create(dataDir, { startParams: EMBEDDED_START_PARAMS });
  onCreated?.({ from: 'initdb', reason, ms: elapsed() });
  return opened;
}

/**
 * Creating a data directory (initdb) grows PGlite's WebAssembly memory to ~700 MB, which a process
 * never gives back. Done in a child process, that memory (and the allocator arenas and compiled
 * WebAssembly a worker thread left behind: ~50 MB) goes away with it, and the API opens the
 * finished directory at its normal size. Where the script is not beside this module (a production
 * bundle without it), the directory is created in this process as before.
 */
async function initEmbeddedInWorker(dataDir: string): Promise<void> {
  const script = fileURLToPath(new URL('./init-embedded-worker.mjs', import.meta.url));
  if (!existsSync(script)) return; // PGlite.create below initialises the directory itself.
  try {
    // Its stderr is a pipe of ours, never inherited: a child that inherits a pipe is given it in blocking
    // mode, and the flag belongs to the pipe, so this process's own log writes to it would block too
    // whenever the reader stalls (log-output.ts in @herald/config).
    const child = spawn(process.execPath, [script, JSON.stringify({ dataDir, startParams: EMBEDDED_START_PARAMS })], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      if (stderr.length < 64 * 1024) stderr += chunk;
    });
    await new Promise<void>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code) =>
        code === 0 ? resolve() : reject(new Error(`init process exited with ${code}: ${stderr.trim()}`)),
      );
    });
  } catch {
    // Not fatal: PGlite.create below initialises the directory itself.
  }
}

/** The database did not answer `ping` in time (it may be hung, or every pooled connection busy). */
export class DatabasePingTimeoutError extends Error {
  override readonly name = 'DatabasePingTimeoutError';
  readonly code = 'DATABASE_PING_TIMEOUT';
  constructor(timeoutMs: number) {
    super(`database did not answer within ${timeoutMs} ms`);
  }
}

function logConnectionError(error: Error): void {
  process.stderr.write(`herald: database connection error (reconnecting on next query): ${error.message}\n`);
}
