import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { webhookRedisKeys } from '@herald/contracts';
import { createDatabase, migrateToLatest } from '@herald/db';
import { queueDueDeliveries } from '@herald/webhook-engine';
import { signWebhook } from '@herald/webhooks';
import { sql } from 'kysely';
import {
  procSample,
  ROOT,
  round,
  type Spread,
  sleep,
  spawnTracked,
  spread,
  stopChild,
  TSX_IMPORT,
  track,
  wallNow,
} from './common.js';
import type { LoopCommand, LoopResult } from './post-loop.js';
import { startHeraldTarget } from './targets.js';
import type { ReceiverStats } from './webhook-receiver.js';

const RECEIVER = fileURLToPath(new URL('./webhook-receiver.ts', import.meta.url));
const POST_LOOP = fileURLToPath(new URL('./post-loop.ts', import.meta.url));
/** The dispatcher's entry point; the scenario runs only once it exists. */
export const DISPATCHER_MAIN = 'apps/webhook-dispatcher/src/main.ts';

export interface WebhookConfig {
  databaseUrl: string | undefined;
  redisUrl: string | undefined;
  /** Raw POST loop: trials × duration, over this many keep-alive connections. */
  trials: number;
  trialMs: number;
  connections: number;
  /** Events published (outbox backlog) before the dispatcher starts; it is timed draining them. */
  dispatcherEvents: number;
  dispatcherTimeoutMs: number;
  /** Also drain the backlog with two dispatcher processes. @default true */
  twoDispatchers?: boolean;
  /** Pending retries in the scheduler-pass measurement. @default 100000 */
  pendingRetries?: number;
  /** Run the (one) dispatcher under `node --cpu-prof`, writing its profile here. */
  cpuProfDir?: string;
  log: (line: string) => void;
}

export interface RawLoopTrial {
  deliveriesPerSec: number;
  requests: number;
  receiverCounted: number;
  errors: number;
  p50Ms: number;
  p99Ms: number;
}

export interface DispatcherRun {
  status: 'ok' | 'incomplete' | 'not available yet' | 'failed' | 'skipped';
  reason?: string;
  events?: number;
  /** Distinct events whose signature verified at the receiver. */
  verified?: number;
  invalid?: number;
  duplicate?: number;
  /** verified / (last delivery − first delivery). */
  deliveriesPerSec?: number;
  /** verified / (last delivery − dispatcher ready): includes the first poll and ramp-up. */
  endToEndPerSec?: number;
  cpuUsPerDelivery?: number;
  samples?: string[];
}

export interface WebhookResult {
  receiver: string;
  rawLoop: { connections: number; trials: RawLoopTrial[]; deliveriesPerSec: Spread };
  /** Signs each body, POSTs at the same concurrency, records outcomes in INSERTs of 100 (null: no database). */
  durableLoop: { connections: number; trials: RawLoopTrial[]; deliveriesPerSec: Spread } | null;
  dispatcher: DispatcherRun;
  /** The same backlog drained by two dispatcher processes. */
  twoDispatchers: DispatcherRun | null;
  /** Dispatcher deliveries/s over the raw loop's median; null when the dispatcher didn't run. */
  ratio: number | null;
  /** Dispatcher deliveries/s over the raw durable loop's median. */
  durableRatio: number | null;
  /** Two dispatchers over one. */
  twoOverOne: number | null;
  /** One due-scan pass (`queueDueDeliveries`) with 100,000 retries pending, none due. */
  schedulerPass: { pendingRetries: number; passMs: Spread } | null;
}

interface IpcChild {
  child: ChildProcess;
  ask<T>(message: unknown): Promise<T>;
}

function forkChild(file: string): IpcChild {
  const child = track(
    fork(file, [], {
      cwd: ROOT,
      execArgv: ['--import', TSX_IMPORT],
      serialization: 'advanced',
      stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
    }),
  );
  let waiting: ((reply: any) => void) | undefined;
  child.on('message', (reply) => {
    const resolve = waiting;
    waiting = undefined;
    resolve?.(reply);
  });
  return {
    child,
    ask: (message) =>
      new Promise((resolve) => {
        waiting = resolve as (reply: any) => void;
        child.send(message as never);
      }),
  };
}

/** One Redis command over RESP, without a client library (PING, DEL). */
export function redisCommand(url: string, args: string[]): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port || 6379), hostname || '127.0.0.1');
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`redis ${args[0]}: timeout`));
    }, 3_000);
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    socket.once('data', (data) => {
      clearTimeout(timer);
      socket.end();
      resolve(data.toString('utf8').trim());
    });
    socket.write(`*${args.length}\r\n${args.map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`).join('')}`);
  });
}

export async function runWebhooks(config: WebhookConfig): Promise<WebhookResult> {
  const { log } = config;
  const receiver = forkChild(RECEIVER);
  const port = await new Promise<number>((resolve) => {
    let buffered = '';
    receiver.child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const match = /listening (\d+)/.exec(buffered);
      if (match) resolve(Number(match[1]));
    });
  });
  const origin = `http://127.0.0.1:${port}`;
  const loop = forkChild(POST_LOOP);
  try {
    // Raw keep-alive POST loop: the same kind of signed body, signed once.
    const secret = `whsec_${randomBytes(24).toString('base64url')}`;
    const eventId = `evt_${randomBytes(12).toString('hex')}`;
    const body = JSON.stringify({
      id: eventId,
      type: 'post.published',
      created: new Date().toISOString(),
      data: {
        id: '00000000-0000-4000-8000-000000000000',
        orgId: 'bench',
        title: 'Benchmark post: raw POST loop',
        tags: ['bench'],
        status: 'PUBLISHED',
        publishedAt: new Date().toISOString(),
        author: { id: 'bench-writer', name: 'Bench Writer' },
      },
    });
    const headers = signWebhook({ eventId, rawBody: body, secrets: [secret] });
    const trials: RawLoopTrial[] = [];
    const rawTrial = async () => {
      await receiver.ask({ type: 'reset' });
      const result = await loop.ask<LoopResult>({
        type: 'run',
        origin,
        path: '/raw',
        connections: config.connections,
        durationMs: config.trialMs,
        headers,
        body,
      } satisfies LoopCommand);
      const counted = await receiver.ask<ReceiverStats>({ type: 'stats' });
      trials.push({
        deliveriesPerSec: Math.round((result.requests / result.durationMs) * 1000),
        requests: result.requests,
        receiverCounted: counted.requests,
        errors: result.errors + result.non2xx,
        p50Ms: result.p50Ms,
        p99Ms: result.p99Ms,
      });
      log(
        `  raw POST loop ${trials.length}: ${trials.at(-1)!.deliveriesPerSec} POST/s (${config.connections} connections)`,
      );
    };
    const durableTrials: RawLoopTrial[] = [];
    const durableTrial = async () => {
      if (!config.databaseUrl) return;
      await receiver.ask({ type: 'reset' });
      const result = await loop.ask<LoopResult>({
        type: 'run',
        origin,
        path: '/durable',
        connections: config.connections,
        durationMs: config.trialMs,
        headers,
        body,
        durable: {
          databaseUrl: config.databaseUrl,
          schema: `bench_durable_${randomBytes(4).toString('hex')}`,
          secret,
        },
      } satisfies LoopCommand);
      const counted = await receiver.ask<ReceiverStats>({ type: 'stats' });
      durableTrials.push({
        deliveriesPerSec: Math.round((result.requests / result.durationMs) * 1000),
        requests: result.requests,
        receiverCounted: counted.requests,
        errors: result.errors + result.non2xx,
        p50Ms: result.p50Ms,
        p99Ms: result.p99Ms,
      });
      log(
        `  raw durable loop ${durableTrials.length}: ${durableTrials.at(-1)!.deliveriesPerSec} deliveries/s recorded`,
      );
    };
    // Raw trials before and after the dispatcher's run, so both see about the same background load.
    const before = Math.ceil(config.trials / 2);
    for (let trial = 0; trial < before; trial++) {
      await rawTrial();
      await durableTrial();
    }
    const dispatcher = await runDispatcher(config, receiver, origin, 1);
    const twoDispatchers = config.twoDispatchers === false ? null : await runDispatcher(config, receiver, origin, 2);
    for (let trial = before; trial < config.trials; trial++) {
      await rawTrial();
      await durableTrial();
    }
    const rawLoop = {
      connections: config.connections,
      trials,
      deliveriesPerSec: spread(trials.map((trial) => trial.deliveriesPerSec)),
    };
    const durableLoop =
      durableTrials.length > 0
        ? {
            connections: config.connections,
            trials: durableTrials,
            deliveriesPerSec: spread(durableTrials.map((trial) => trial.deliveriesPerSec)),
          }
        : null;
    const schedulerPass = config.databaseUrl
      ? await measureSchedulerPass(config.databaseUrl, config.pendingRetries ?? 100_000).catch((error: unknown) => {
          log(`  scheduler pass: failed (${(error as Error).message})`);
          return null;
        })
      : null;
    if (schedulerPass)
      log(`  scheduler pass with ${schedulerPass.pendingRetries} pending retries: ${schedulerPass.passMs.median} ms`);

    if (dispatcher.status === 'ok' || dispatcher.status === 'incomplete') {
      log(
        `  dispatcher: ${dispatcher.deliveriesPerSec} signed deliveries/s (${dispatcher.verified}/${dispatcher.events})`,
      );
    } else {
      log(`  dispatcher: ${dispatcher.status}${dispatcher.reason ? ` (${dispatcher.reason})` : ''}`);
    }
    return {
      receiver:
        'node:http in its own process, 200 as soon as the body has arrived; verifies signatures and dedupes after answering',
      rawLoop,
      durableLoop,
      dispatcher,
      twoDispatchers,
      ratio:
        dispatcher.deliveriesPerSec !== undefined
          ? round(dispatcher.deliveriesPerSec / rawLoop.deliveriesPerSec.median, 3)
          : null,
      durableRatio:
        dispatcher.deliveriesPerSec !== undefined && durableLoop
          ? round(dispatcher.deliveriesPerSec / durableLoop.deliveriesPerSec.median, 3)
          : null,
      twoOverOne:
        twoDispatchers?.deliveriesPerSec !== undefined && dispatcher.deliveriesPerSec
          ? round(twoDispatchers.deliveriesPerSec / dispatcher.deliveriesPerSec, 3)
          : null,
      schedulerPass,
    };
  } finally {
    await Promise.all([stopChild(receiver.child), stopChild(loop.child)]);
  }
}

async function runDispatcher(
  config: WebhookConfig,
  receiver: IpcChild,
  origin: string,
  processes: number,
): Promise<DispatcherRun> {
  if (!existsSync(`${ROOT}${DISPATCHER_MAIN}`)) {
    return { status: 'not available yet', reason: `${DISPATCHER_MAIN} does not exist in this tree` };
  }
  if (!config.databaseUrl || !config.redisUrl) {
    return { status: 'skipped', reason: 'the dispatcher needs DATABASE_URL and REDIS_URL' };
  }
  const { log } = config;
  const prefix = `herald-bench-${randomBytes(4).toString('hex')}:`;
  let herald: Awaited<ReturnType<typeof startHeraldTarget>> | undefined;
  const dispatchers: ChildProcess[] = [];
  try {
    herald = await startHeraldTarget({
      pods: 1,
      pubsub: 'redis',
      databaseUrl: config.databaseUrl,
      redisUrl: config.redisUrl,
      database: 'postgres',
      env: { WEBHOOK_ALLOW_PRIVATE_URLS: 'true', HERALD_REDIS_PREFIX: prefix },
      label: 'webhook setup',
    });
    const created = await herald.graphql(
      'mutation Endpoint($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } secret } }',
      { input: { orgId: herald.orgId, url: `${origin}/hook`, eventTypes: ['post.published'] } },
    );
    await receiver.ask({ type: 'reset', secret: created.createWebhookEndpoint.secret });

    // The backlog: every event is in the outbox before the dispatcher starts.
    const events = await herald.prepareEvents(config.dispatcherEvents);
    const t0 = wallNow();
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < events.length) await herald!.publish(events[next++]!);
      }),
    );
    log(`  published ${events.length} posts (the dispatcher's backlog) in ${Math.round(wallNow() - t0)} ms`);

    const output: string[] = [];
    const startOne = (): { child: ChildProcess; ready: Promise<number> } => {
      const profArgs = config.cpuProfDir && processes === 1 ? ['--cpu-prof', '--cpu-prof-dir', config.cpuProfDir] : [];
      const child = spawnTracked(process.execPath, [...profArgs, '--import', TSX_IMPORT, DISPATCHER_MAIN], {
        cwd: ROOT,
        env: {
          PATH: process.env.PATH ?? '',
          NODE_ENV: 'production',
          LOG_LEVEL: 'info',
          HOST: '127.0.0.1',
          PORT: '0',
          DATABASE_URL: herald!.env.DATABASE_URL!,
          REDIS_URL: config.redisUrl!,
          HERALD_REDIS_PREFIX: prefix,
          WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
          // The same concurrency as the raw loops: this many requests in flight to the one endpoint.
          WEBHOOK_ENDPOINT_CONCURRENCY: String(config.connections),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      dispatchers.push(child);
      const ready = new Promise<number>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`not ready in 60 s: ${output.slice(-5).join(' ')}`)), 60_000);
        let buffered = '';
        child.stderr?.setEncoding('utf8').on('data', (chunk: string) => output.push(chunk));
        child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
          buffered += chunk;
          const lines = buffered.split('\n');
          buffered = lines.pop() ?? '';
          for (const line of lines) {
            output.push(line);
            if (output.length > 40) output.shift();
            if (line.includes('herald webhook dispatcher ready')) {
              clearTimeout(timer);
              resolve(wallNow());
            }
          }
        });
        child.once('exit', (code) => {
          clearTimeout(timer);
          reject(new Error(`exited with ${code}: ${output.slice(-5).join(' ')}`));
        });
      });
      return { child, ready };
    };
    const started = Array.from({ length: processes }, startOne);
    const ready = Math.max(...(await Promise.all(started.map((one) => one.ready))));
    const child = started[0]!.child;
    const cpuNow = () => started.reduce((sum, one) => sum + procSample(one.child.pid!).cpuUs, 0);
    const cpu0 = cpuNow();
    let stats = await receiver.ask<ReceiverStats>({ type: 'stats' });
    let lastProgress = wallNow();
    let lastVerified = 0;
    while (stats.verified < events.length && wallNow() - ready < config.dispatcherTimeoutMs) {
      await sleep(100);
      if (child.exitCode !== null) break;
      stats = await receiver.ask<ReceiverStats>({ type: 'stats' });
      if (stats.verified > lastVerified) {
        lastVerified = stats.verified;
        lastProgress = wallNow();
      } else if (wallNow() - lastProgress > 15_000) {
        break;
      }
    }
    const cpuUs = started.every((one) => one.child.exitCode === null) ? cpuNow() - cpu0 : Number.NaN;
    const span = stats.lastAt - stats.firstAt;
    return {
      status: stats.verified >= events.length ? 'ok' : 'incomplete',
      ...(stats.verified < events.length
        ? { reason: `${stats.verified} of ${events.length} delivered before giving up; ${output.slice(-3).join(' ')}` }
        : {}),
      events: events.length,
      verified: stats.verified,
      invalid: stats.invalid,
      duplicate: stats.duplicate,
      deliveriesPerSec: span > 0 ? Math.round((stats.verified / span) * 1000) : 0,
      endToEndPerSec: Math.round((stats.verified / (stats.lastAt - ready)) * 1000),
      cpuUsPerDelivery: round(cpuUs / Math.max(1, stats.verified), 1),
      samples: stats.invalidSamples,
    };
  } catch (error) {
    return { status: 'failed', reason: (error as Error).message.slice(0, 500) };
  } finally {
    await Promise.all(dispatchers.map((child) => stopChild(child)));
    await herald?.stop();
    const keys = webhookRedisKeys(prefix);
    if (config.redisUrl)
      await redisCommand(config.redisUrl, ['DEL', keys.workStream, keys.deadLetterStream, keys.parkedStream]).catch(
        () => {},
      );
  }
}

/**
 * The due scan's cost with a large retry backlog: 100,000 PENDING deliveries waiting for a retry (none
 * due), then `queueDueDeliveries` timed a few times. It walks the index on `next_attempt_at` with a
 * LIMIT, so it should cost about the same as with an empty table.
 */
async function measureSchedulerPass(
  databaseUrl: string,
  pendingRetries: number,
): Promise<{ pendingRetries: number; passMs: Spread }> {
  const schema = `bench_sched_${randomBytes(4).toString('hex')}`;
  const url = new URL(databaseUrl);
  url.searchParams.set('options', `-c search_path=${schema}`);
  const admin = await createDatabase({ kind: 'postgres', url: databaseUrl, poolMax: 1 });
  await sql`create schema ${sql.id(schema)}`.execute(admin.db);
  const database = await createDatabase({ kind: 'postgres', url: url.toString(), poolMax: 2 });
  try {
    await migrateToLatest(database.db);
    await sql`insert into webhook_endpoints (id, org_id, url, event_types) values ('we_bench', 'bench', 'http://127.0.0.1:9/', '{post.published}')`.execute(
      database.db,
    );
    await sql`insert into webhook_outbox (id, org_id, type, body, dispatched_at) values ('evt_bench', 'bench', 'post.published', '{}', now())`.execute(
      database.db,
    );
    await sql`
      insert into webhook_outbox (id, org_id, type, body, dispatched_at)
      select 'evt_bench' || n, 'bench', 'post.published', '{}', now() from generate_series(1, ${pendingRetries}) n
    `.execute(database.db);
    await sql`
      insert into webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, attempt_count, next_attempt_at)
      select 'del_bench' || n, 'evt_bench' || n, 'we_bench', 'bench', 'post.published', 1,
        now() + interval '1 hour' + n * interval '1 millisecond'
      from generate_series(1, ${pendingRetries}) n
    `.execute(database.db);
    await sql`analyze webhook_deliveries`.execute(database.db);
    const passes: number[] = [];
    for (let i = 0; i < 7; i++) {
      const t0 = wallNow();
      const due = await queueDueDeliveries(database.db, { limit: 200, queueLeaseMs: 15_000 });
      passes.push(round(wallNow() - t0, 2));
      if (due.length > 0) throw new Error(`expected no due delivery, got ${due.length}`);
    }
    return { pendingRetries, passMs: spread(passes.slice(2)) };
  } finally {
    await database.close();
    await sql`drop schema ${sql.id(schema)} cascade`.execute(admin.db).catch(() => {});
    await admin.close();
  }
}

const num = (value: number | null | undefined, digits = 0) =>
  value === null || value === undefined || Number.isNaN(value)
    ? '–'
    : value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** Table rows of the engine's part (raw durable loop, two dispatchers), for report.ts's webhook table. */
export function renderWebhookEngineRows(w: WebhookResult): string[] {
  const rows: string[] = [];
  if (w.durableLoop) {
    const d = w.durableLoop.deliveriesPerSec;
    rows.push(
      `| raw durable loop (${w.durableLoop.connections} connections; signs each body, records outcomes in INSERTs of 100) | ${num(d.median)} (${num(d.min)}–${num(d.max)}) | ${num(d.median / w.rawLoop.deliveriesPerSec.median, 2)}× | p99 ${w.durableLoop.trials.map((t) => num(t.p99Ms, 1)).join(', ')} ms |`,
    );
  }
  const two = w.twoDispatchers;
  if (two && (two.status === 'ok' || two.status === 'incomplete')) {
    rows.push(
      `| webhook dispatcher, 2 processes | ${num(two.deliveriesPerSec)} | ${num((two.deliveriesPerSec ?? 0) / w.rawLoop.deliveriesPerSec.median, 2)}× | ${two.status}: ${num(two.verified)}/${num(two.events)} verified, ${two.invalid} invalid, ${two.duplicate} duplicate, ${num((two.events ?? 0) - (two.verified ?? 0))} not delivered when the run stopped; ${num(two.cpuUsPerDelivery)} µs CPU/delivery (both) |`,
    );
  } else if (two) {
    rows.push(`| webhook dispatcher, 2 processes | **${two.status}** | – | ${two.reason ?? ''} |`);
  }
  return rows;
}

/** Lines under the webhook table: the ratios the issue asks for and the scheduler pass. */
export function renderWebhookEngineNotes(w: WebhookResult): string[] {
  const d = w.dispatcher;
  const lines = [''];
  lines.push(
    `- one dispatcher: ${num(d.deliveriesPerSec)} deliveries/s = ${num(w.durableRatio, 2)}× the raw durable loop (target ≥ 5,000/s and ≥ 0.6×); not delivered when the run stopped (lost unless the run timed out) ${num((d.events ?? 0) - (d.verified ?? 0))}, duplicates ${num(d.duplicate)}`,
  );
  lines.push(`- two dispatchers over one: ${num(w.twoOverOne, 2)}× (target ≥ 1.6×)`);
  if (w.schedulerPass) {
    const p = w.schedulerPass.passMs;
    lines.push(
      `- scheduler pass (due scan, LIMIT 200) with ${num(w.schedulerPass.pendingRetries)} pending retries: ${num(p.median, 2)} ms median (${num(p.min, 2)}–${num(p.max, 2)})`,
    );
  }
  return lines;
}
