/**
 * The raw side of the webhook benchmark, in its own process: `connections` keep-alive connections
 * (undici Pool), each looping one POST at a time of the same pre-signed delivery for `durationMs`.
 * That is the most a sender can do against this receiver on this machine: no queue, no database, no
 * signing per request. Controlled over IPC: `{type:'run', …}` → `{type:'loopResult', …}`.
 */
import { randomBytes } from 'node:crypto';
import { signWebhook } from '@herald/webhooks';
import pg from 'pg';
import { Pool } from 'undici';
import { Histogram, wallNow } from './common.js';

/** The raw durable loop records its outcomes in PostgreSQL in multi-row INSERTs of this many rows. */
export const DURABLE_BATCH_ROWS = 100;

export interface LoopCommand {
  type: 'run';
  origin: string;
  path: string;
  connections: number;
  durationMs: number;
  headers: Record<string, string>;
  body: string;
  /**
   * The raw durable loop: every request gets its own event id and is signed (`signWebhook`) like a
   * delivery, and every outcome is recorded, one multi-row INSERT per {@link DURABLE_BATCH_ROWS}, into
   * a table in `schema` (created and dropped here). The floor of work any durable dispatcher must do.
   */
  durable?: { databaseUrl: string; schema: string; secret: string };
}

export interface LoopResult {
  type: 'loopResult';
  requests: number;
  errors: number;
  non2xx: number;
  durationMs: number;
  p50Ms: number;
  p99Ms: number;
}

async function run(command: LoopCommand): Promise<LoopResult> {
  const pool = new Pool(command.origin, { connections: command.connections, pipelining: 1 });
  const durable = command.durable;
  const db = durable ? new pg.Pool({ connectionString: durable.databaseUrl, max: 4 }) : undefined;
  const table = durable ? `"${durable.schema}".outcomes` : '';
  if (db && durable) {
    await db.query(`create schema if not exists "${durable.schema}"`);
    await db.query(
      `create table ${table} (id text primary key, status_code int, duration_ms double precision, at timestamptz not null)`,
    );
  }
  let outcomes: unknown[][] = [];
  const flushes: Promise<unknown>[] = [];
  const flush = async () => {
    if (!db || outcomes.length === 0) return;
    const rows = outcomes;
    outcomes = [];
    const values = rows.map((_, i) => `($${i * 4 + 1}, $${i * 4 + 2}, $${i * 4 + 3}, $${i * 4 + 4})`).join(', ');
    await db.query(`insert into ${table} (id, status_code, duration_ms, at) values ${values}`, rows.flat());
  };
  const template = command.body;
  const latency = new Histogram();
  let requests = 0;
  let errors = 0;
  let non2xx = 0;
  const start = wallNow();
  let end = start;
  const lane = async () => {
    while (wallNow() - start < command.durationMs) {
      const sent = wallNow();
      let headers = command.headers;
      let body = command.body;
      let eventId = '';
      if (durable) {
        eventId = `evt_${randomBytes(16).toString('hex')}`;
        body = template.replace(/"id":"evt_[0-9a-f]+"/, `"id":"${eventId}"`);
        headers = signWebhook({ eventId, rawBody: body, secrets: [durable.secret] });
      }
      let statusCode: number | null = null;
      try {
        const response = await pool.request({ path: command.path, method: 'POST', headers, body });
        await response.body.dump();
        statusCode = response.statusCode;
        if (response.statusCode < 200 || response.statusCode > 299) non2xx++;
        else requests++;
      } catch {
        errors++;
      }
      end = wallNow();
      if (durable) {
        outcomes.push([eventId, statusCode, end - sent, new Date()]);
        // The lane that fills a batch waits for its INSERT, as a dispatcher waits for its record.
        if (outcomes.length >= DURABLE_BATCH_ROWS) {
          const flushed = flush();
          flushes.push(flushed);
          await flushed;
        }
      }
      latency.record((end - sent) * 1000);
    }
  };
  await Promise.all(Array.from({ length: command.connections }, lane));
  await flush();
  await Promise.all(flushes);
  end = wallNow();
  await pool.close();
  if (db && durable) {
    await db.query(`drop schema "${durable.schema}" cascade`).catch(() => {});
    await db.end();
  }
  const summary = latency.summaryMs();
  return {
    type: 'loopResult',
    requests,
    errors,
    non2xx,
    durationMs: end - start,
    p50Ms: summary.p50Ms,
    p99Ms: summary.p99Ms,
  };
}

process.on('message', (command: LoopCommand) => {
  if (command.type === 'run') void run(command).then((result) => process.send?.(result));
});
process.on('disconnect', () => process.exit(0));
