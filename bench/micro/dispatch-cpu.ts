/**
 * The dispatcher's own CPU per delivery, measured in process (no bench coordinator, no tsx loader in
 * the way): one dispatcher, wired as apps/webhook-dispatcher wires it (prepared statements, its
 * info-level logger on stdout; the result lines go to stderr), drains backlogs of outbox events to a
 * receiver in a child process that answers 200 at once. For each round it prints this process's CPU
 * and the CPU of the PostgreSQL backends serving it, per delivery, from the round's start (the
 * dispatcher's start, for the first) until the receiver has every delivery of the round.
 *
 * The first round includes the dispatcher's start and its warm-up (connections, prepared statements,
 * V8 compiling the hot path on its background threads): a small backlog measures mostly that. Later
 * rounds (the backlog inserted while the dispatcher idles, then the relay woken) measure a warm one.
 * `threadsUs` splits the process's CPU per delivery by thread: the event loop first, then the others
 * (V8's workers: optimising compiles and GC; libuv's pool); a new process's extra CPU shows there.
 *
 * Real PostgreSQL and Redis (DATABASE_URL / REDIS_URL, the local servers by default), a throw-away
 * schema and Redis prefix.
 *
 *   node --import tsx bench/micro/dispatch-cpu.ts [events=10000] [endpoints=1] [cap=10] [rounds=1]
 *   node --cpu-prof --import tsx bench/micro/dispatch-cpu.ts 20000     (a profile of the drain, mostly)
 *   DISPATCH_CPU_QUERIES=1 …                                       (also: statements sent, by kind)
 *   DISPATCH_CPU_DISPATCHERS=2 …                                   (two dispatchers, in this process)
 *   DISPATCH_CPU_TRACING=0.01 …     (tracing on, `parentbased_traceidratio` at that ratio, exporting
 *                                    OTLP/protobuf to the receiver process, which answers 200; each event is
 *                                    stored with a `traceparent` sampled at that ratio, as publishPost's are)
 *
 * For A/B comparisons run it alternately from two trees, in the same time window.
 */

import { fork } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { webhookRedisKeys } from '@herald/contracts';
import { createDatabase, insertWebhookEndpoint, migrateToLatest } from '@herald/db';
import { startTracing } from '@herald/telemetry/start';
import { TEST_KEYRING } from '@herald/testing';
import { createDispatcher, createRedisStreamQueue } from '@herald/webhook-engine';
import { generateWebhookSecret } from '@herald/webhooks';
import pg from 'pg';
import { createLogger } from '../../apps/webhook-dispatcher/src/logger.js';
import { benchOutboxRows } from '../src/outbox-rows.js';
import { redisCommand } from '../src/webhooks.js';

const EVENTS = Number(process.argv[2] ?? 10_000);
const ENDPOINTS = Number(process.argv[3] ?? 1);
const CAP = Number(process.argv[4] ?? 10);
const ROUNDS = Number(process.argv[5] ?? 1);
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const INSERT_BATCH = 1_000;

if (process.argv[2] === 'receiver') {
  // Counts distinct (path, event id) pairs of a round; reports once it has the round's `expect`.
  const { createServer } = await import('node:http');
  let expected = Number.POSITIVE_INFINITY;
  let seen = new Set<string>();
  let requests = 0;
  process.on('message', (message) => {
    expected = (message as { expect: number }).expect;
    seen = new Set();
    requests = 0;
  });
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-length': '0' }).end();
      // DISPATCH_CPU_TRACING: the dispatcher's span exports, not deliveries.
      if (req.url?.startsWith('/otlp/')) return;
      requests++;
      seen.add(`${req.url} ${req.headers['x-webhook-id']}`);
      if (seen.size === expected) process.send?.({ done: true, requests });
    });
  });
  server.listen(0, '127.0.0.1', () => process.send?.({ port: (server.address() as { port: number }).port }));
  process.on('disconnect', () => process.exit(0));
} else {
  const child = fork(new URL(import.meta.url).pathname, ['receiver'], { execArgv: ['--import', 'tsx'] });
  const port = await new Promise<number>((resolve) =>
    child.once('message', (message) => resolve((message as { port: number }).port)),
  );
  /** Tells the receiver how many deliveries the next round makes; resolves with its request count once seen. */
  const expectRound = (deliveries: number) => {
    const done = new Promise<number>((resolve) => {
      const listener = (message: unknown) => {
        const m = message as { done?: boolean; requests?: number };
        if (!m.done) return;
        child.off('message', listener);
        resolve(m.requests ?? 0);
      };
      child.on('message', listener);
    });
    child.send({ expect: deliveries });
    return done;
  };

  const tracingRatio = process.env.DISPATCH_CPU_TRACING ? Number(process.env.DISPATCH_CPU_TRACING) : undefined;
  const tracing =
    tracingRatio === undefined
      ? undefined
      : await startTracing({
          serviceName: 'herald-webhook-dispatcher',
          env: Object.assign(process.env, {
            OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}/otlp`,
            OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
            OTEL_TRACES_SAMPLER_ARG: String(tracingRatio),
          }),
        });
  /** What publishPost stores with an event while tracing: its operation's context, sampled at the ratio. */
  const traceparent = () => {
    const ids = randomUUID().replaceAll('-', '');
    return `00-${ids}-${ids.slice(0, 16)}-${Math.random() < (tracingRatio ?? 0) ? '01' : '00'}`;
  };
  const statements = process.env.DISPATCH_CPU_QUERIES ? new Map<string, number>() : undefined;
  if (statements) {
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function counted(this: pg.Client, ...args: unknown[]) {
      const first = args[0];
      const text = (typeof first === 'string' ? first : String((first as { text?: string })?.text ?? '?'))
        .replace(/\s+/g, ' ')
        .trim()
        .slice(0, 70);
      statements.set(text, (statements.get(text) ?? 0) + 1);
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof query;
  }
  const schema = `herald_bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`create schema "${schema}"`);
  const applicationName = `herald-dispatch-cpu-${randomBytes(4).toString('hex')}`;
  const url = new URL(DATABASE_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  url.searchParams.set('application_name', applicationName);
  const database = await createDatabase({
    kind: 'postgres',
    url: url.toString(),
    poolMax: 10,
    preparedStatements: true,
  });
  const prefix = `herald-bench-${randomBytes(4).toString('hex')}:`;
  const keys = webhookRedisKeys(prefix);
  // The app's logger (JSON lines on stdout, info level); the result goes to stderr.
  const logger = createLogger('info');
  // DISPATCH_CPU_DISPATCHERS=2: that many dispatchers share the work (in this one process).
  const queues = Array.from({ length: Number(process.env.DISPATCH_CPU_DISPATCHERS ?? 1) }, () =>
    createRedisStreamQueue({ redisUrl: REDIS_URL, keys, logger }),
  );
  const dispatchers = queues.map((queue) =>
    createDispatcher({
      db: database.db,
      databaseUrl: url.toString(),
      queue,
      logger,
      keyring: TEST_KEYRING,
      settings: {
        timeoutMs: 10_000,
        retryBaseMs: 5_000,
        retryHorizonMs: 3 * 24 * 3_600_000,
        allowPrivateUrls: true,
        concurrency: 100,
        endpointConcurrency: CAP,
        pollIntervalMs: 500,
      },
    }),
  );
  try {
    await migrateToLatest(database.db);
    const orgId = `org-bench-${randomUUID()}`;
    for (let i = 0; i < ENDPOINTS; i++) {
      await insertWebhookEndpoint(database.db, {
        orgId,
        url: `http://127.0.0.1:${port}/hook/${i}`,
        eventTypes: ['post.published'],
        secret: generateWebhookSecret(),
        keyring: TEST_KEYRING,
      });
    }
    /** Inserts a backlog in one transaction, and calls `beforeCommit` (the round's clock starts) just before its commit. */
    const fillOutbox = (beforeCommit: () => Promise<void>) =>
      database.db.transaction().execute(async (trx) => {
        for (let offset = 0; offset < EVENTS; offset += INSERT_BATCH) {
          const rows = benchOutboxRows(orgId, offset, Math.min(EVENTS, offset + INSERT_BATCH));
          await trx
            .insertInto('webhook_outbox')
            .values(tracing ? rows.map((row) => ({ ...row, traceparent: traceparent() })) : rows)
            .execute();
        }
        await beforeCommit();
      });
    const backendCpu = async () => {
      const { rows } = await admin.query<{ pid: number }>(
        'select pid from pg_stat_activity where application_name = $1',
        [applicationName],
      );
      const cpu = new Map<number, number>();
      for (const { pid } of rows) {
        try {
          const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
          cpu.set(pid, (Number(fields[11]) + Number(fields[12])) * 10_000);
        } catch {}
      }
      return cpu;
    };
    const deliveries = EVENTS * ENDPOINTS;
    /** CPU µs per thread of this process (main = the event loop; the rest: V8's and libuv's pools). */
    const threadCpu = (): Map<string, number> => {
      const cpu = new Map<string, number>();
      for (const tid of readdirSync('/proc/self/task')) {
        try {
          const fields = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ');
          cpu.set(tid, (Number(fields[11]) + Number(fields[12])) * 10_000);
        } catch {}
      }
      return cpu;
    };
    for (let round = 1; round <= ROUNDS; round++) {
      const done = expectRound(deliveries);
      let pg0 = new Map<number, number>();
      let cpu0 = process.cpuUsage();
      let threads0 = new Map<string, number>();
      let t0 = 0;
      await fillOutbox(async () => {
        statements?.clear();
        pg0 = await backendCpu();
        cpu0 = process.cpuUsage();
        threads0 = threadCpu();
        t0 = performance.now();
      });
      for (const dispatcher of dispatchers) {
        if (round === 1) await dispatcher.start();
        else dispatcher.notifyOutbox();
      }
      const requests = await done;
      const cpu = process.cpuUsage(cpu0);
      const threads1 = threadCpu();
      const seconds = (performance.now() - t0) / 1_000;
      const pg1 = await backendCpu();
      let pgUs = 0;
      for (const [pid, us] of pg1) pgUs += us - (pg0.get(pid) ?? 0);
      if (statements) {
        for (const [text, n] of [...statements].sort((a, b) => b[1] - a[1])) {
          console.error(`${String(n).padStart(7)} ${(n / deliveries).toFixed(4)}/delivery  ${text}`);
        }
      }
      console.error(
        JSON.stringify({
          round,
          deliveries,
          duplicates: requests - deliveries,
          perSec: Math.round(deliveries / seconds),
          cpuUs: Number(((cpu.user + cpu.system) / deliveries).toFixed(1)),
          userUs: Number((cpu.user / deliveries).toFixed(1)),
          sysUs: Number((cpu.system / deliveries).toFixed(1)),
          pgUs: Number((pgUs / deliveries).toFixed(1)),
          // Per thread (10 ms ticks, so ±1 tick): the event loop, then the others with any CPU in the round.
          threadsUs: [...threads1]
            .map(([tid, us]) => [tid, (us - (threads0.get(tid) ?? 0)) / deliveries] as const)
            .filter(([tid, us]) => us > 0 || tid === String(process.pid))
            .sort((a, b) => (a[0] === String(process.pid) ? -1 : b[0] === String(process.pid) ? 1 : b[1] - a[1]))
            .map(([, us]) => Number(us.toFixed(1))),
          endpoints: ENDPOINTS,
          cap: CAP,
          tracing: tracingRatio ?? 'off',
        }),
      );
    }
  } finally {
    await Promise.all(dispatchers.map((dispatcher) => dispatcher.stop()));
    await Promise.all(queues.map((queue) => queue.close()));
    await tracing?.shutdown(2_000);
    for (const key of [keys.workStream, keys.deadLetterStream, keys.parkedStream]) {
      await redisCommand(REDIS_URL, ['DEL', key]).catch(() => {});
    }
    await database.close();
    await admin.query(`drop schema if exists "${schema}" cascade`);
    await admin.end();
    child.disconnect();
    child.kill();
  }
}
