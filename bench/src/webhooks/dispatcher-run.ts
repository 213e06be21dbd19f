/**
 * One dispatcher run: a backlog drained by one or two `apps/webhook-dispatcher` processes (fresh or warm,
 * one or several endpoints), or the steady-rate trial, verified at the receiver.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, existsSync } from 'node:fs';
import { webhookRedisKeys } from '@herald/contracts';
import { createDatabase, type HeraldDatabase } from '@herald/db';
import { connectOutboxWakePublisher } from '@herald/webhook-engine';
import pg from 'pg';
import {
  machineCpuSince,
  machineSample,
  procSample,
  ROOT,
  round,
  sleep,
  spawnTracked,
  stopChild,
  TSX_IMPORT,
  wallNow,
} from '../common.js';
import { withSessionSettings } from '../pg-session-options.js';
import { startHeraldTarget } from '../targets.js';
import type { ReceiverStats } from '../webhook-receiver.js';
import { DISPATCHER_MAIN, type IpcChild, QUERY_COUNTER, redisCommand } from './children.js';
import { countAttempts, explainDuplicates, outboxPostOrder, waitForIdleEngine } from './engine-db.js';
import { type DispatcherRun, type SteadyLatency, WARM_FRACTION, type WebhookConfig } from './results.js';
import { percentiles, publishSteadily, type SteadyPublish, steadyStages } from './steady.js';

export async function runDispatcher(
  config: WebhookConfig,
  receiver: IpcChild,
  origin: string,
  processes: number,
  mode: 'backlog' | 'steady' = 'backlog',
  /** Endpoints (on the same receiver, paths /hook/0…) that get every event. */
  endpointCount = 1,
  /** Events in the backlog. @default config.dispatcherEvents */
  backlogEvents = config.dispatcherEvents,
  /** Steady mode: publishPost sends its NOTIFY (single mode's path) instead of the Redis wake-up. */
  steadyNotify = false,
  /** Backlog mode: warm the dispatchers with this many events first (see {@link WebhookConfig.warmUpEvents}). */
  warmUpEvents = 0,
  /** The endpoints' ordering; FIFO runs also check that the receiver saw the events in outbox (`seq`) order. */
  ordering: 'UNORDERED' | 'FIFO' = 'UNORDERED',
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
  const endpointCap = config.endpointCap ?? config.connections;
  const applicationName = `herald-bench-dispatcher-${randomBytes(4).toString('hex')}`;
  let monitor: pg.Client | undefined;
  let publisher: HeraldDatabase | undefined;
  let wake: ReturnType<typeof connectOutboxWakePublisher> | undefined;
  try {
    herald = await startHeraldTarget({
      pods: 1,
      pubsub: 'redis',
      databaseUrl: config.databaseUrl,
      redisUrl: config.redisUrl,
      database: 'postgres',
      env: { ...config.heraldEnv, WEBHOOK_ALLOW_PRIVATE_URLS: 'true', HERALD_REDIS_PREFIX: prefix },
      label: 'webhook setup',
    });
    const secrets: Record<string, string> = {};
    for (let i = 0; i < endpointCount; i++) {
      const path = endpointCount === 1 ? '/hook' : `/hook/${i}`;
      const created = await herald.graphql(
        'mutation Endpoint($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } secret } }',
        { input: { orgId: herald.orgId, url: `${origin}${path}`, eventTypes: ['post.published'], ordering } },
      );
      secrets[path] = created.createWebhookEndpoint.secret;
    }
    // Tracked: when each post first arrived (the steady trial's latency; a FIFO run's order).
    const track = mode === 'steady' || ordering === 'FIFO';
    await receiver.ask(
      endpointCount === 1 ? { type: 'reset', secret: secrets['/hook'], track } : { type: 'reset', secrets, track },
    );

    const steadyRate = config.steadyEventsPerSec ?? 1000;
    const steadyMs = config.steadyMs ?? 10_000;
    const events = await herald.prepareEvents(
      mode === 'steady' ? Math.round((steadyRate * steadyMs) / 1000) : backlogEvents,
    );
    /** Deliveries the receiver must verify: every event at every endpoint. */
    const expected = events.length * endpointCount;
    const warming = mode === 'backlog' && warmUpEvents > 0;
    const warmUp = warming ? await herald.prepareEvents(warmUpEvents) : [];
    const publishAll = async (posts: typeof events) => {
      let next = 0;
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          while (next < posts.length) await herald!.publish(posts[next++]!);
        }),
      );
    };
    const publishBacklog = async () => {
      // The backlog: every event is in the outbox before the dispatcher starts (or continues).
      const t0 = wallNow();
      await publishAll(events);
      log(
        `  published ${events.length} posts (the dispatcher's backlog, ${expected} deliveries to ${endpointCount} endpoint${endpointCount === 1 ? '' : 's'}) in ${Math.round(wallNow() - t0)} ms`,
      );
    };
    if (mode === 'backlog' && !warming) await publishBacklog();
    const dispatcherUrl = new URL(herald.env.DATABASE_URL!);
    const encryptionKeys = herald.env.HERALD_ENCRYPTION_KEYS!;
    dispatcherUrl.searchParams.set('application_name', applicationName);
    // Diagnostics: PostgreSQL settings for the dispatchers' sessions (e.g.
    // BENCH_DISPATCHER_PG_OPTIONS='-c log_min_duration_statement=0' logs each statement's duration).
    const dispatcherDatabaseUrl = withSessionSettings(
      dispatcherUrl.toString(),
      process.env.BENCH_DISPATCHER_PG_OPTIONS,
    );
    monitor = new pg.Client({ connectionString: config.databaseUrl });
    await monitor.connect();
    const queryCounts = new Map<ChildProcess, number>();
    /**
     * Each dispatcher's count as of its "ready" line (the counter's lines and the log share stdout, so
     * this is its start-up: migrations check, consumer group). A small backlog can be drained within
     * moments of "ready", so the baseline is taken here rather than after a pause.
     */
    const readyCounts = new Map<ChildProcess, number>();

    const output: string[] = [];
    const startOne = (): { child: ChildProcess; ready: Promise<number> } => {
      const profArgs = config.cpuProfDir && processes === 1 ? ['--cpu-prof', '--cpu-prof-dir', config.cpuProfDir] : [];
      // Diagnostics: extra node flags for the dispatchers (e.g. BENCH_DISPATCHER_NODE_FLAGS=--max-semi-space-size=4).
      const nodeFlags = (process.env.BENCH_DISPATCHER_NODE_FLAGS ?? '').split(' ').filter(Boolean);
      const build = config.dispatcherBuild;
      const child = spawnTracked(
        process.execPath,
        build
          ? [...nodeFlags, ...profArgs, ...build.args.slice(0, -1), '--import', build.queryCounter, build.args.at(-1)!]
          : [...nodeFlags, ...profArgs, '--import', TSX_IMPORT, '--import', QUERY_COUNTER, DISPATCHER_MAIN],
        {
          cwd: build?.cwd ?? ROOT,
          env: {
            ...config.heraldEnv,
            PATH: process.env.PATH ?? '',
            ...(build ? { BENCH_PG_FROM: build.pgFrom } : {}),
            ...(process.env.BENCH_PG_QUERY_LOG ? { BENCH_PG_QUERY_LOG: process.env.BENCH_PG_QUERY_LOG } : {}),
            NODE_ENV: 'production',

            LOG_LEVEL: process.env.BENCH_DISPATCHER_LOG_LEVEL ?? 'info',
            HOST: '127.0.0.1',
            PORT: '0',
            DATABASE_URL: dispatcherDatabaseUrl,
            REDIS_URL: config.redisUrl!,
            HERALD_REDIS_PREFIX: prefix,
            // The API's keyring: the dispatcher opens the secrets the API sealed.
            HERALD_ENCRYPTION_KEYS: encryptionKeys,
            WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
            // The same concurrency as the raw loops: this many requests in flight to the one endpoint.
            WEBHOOK_ENDPOINT_CONCURRENCY: String(endpointCap),
            ...(process.env.BENCH_WEBHOOK_CONCURRENCY
              ? { WEBHOOK_CONCURRENCY: process.env.BENCH_WEBHOOK_CONCURRENCY }
              : {}),
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
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
            const counted = /^pg-queries (\d+)$/.exec(line);
            if (counted) {
              queryCounts.set(child, Number(counted[1]));
              continue;
            }
            output.push(line);
            if (process.env.BENCH_DISPATCHER_LOG) appendFileSync(process.env.BENCH_DISPATCHER_LOG, `${line}\n`);
            if (output.length > 40) output.shift();
            if (line.includes('herald webhook dispatcher ready')) {
              readyCounts.set(child, queryCounts.get(child) ?? 0);
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
    let ready = Math.max(...(await Promise.all(started.map((one) => one.ready))));
    const child = started[0]!.child;
    if (warming) {
      // Warm: deliver the warm-up events, stop the dispatchers while the backlog is published, continue
      // them. Their code is compiled, their connections open; they find the backlog as a fresh one would.
      await publishAll(warmUp);
      const warmUpDeadline = wallNow() + config.dispatcherTimeoutMs;
      while ((await receiver.ask<ReceiverStats>({ type: 'stats' })).verified < warmUp.length * endpointCount) {
        if (wallNow() > warmUpDeadline) throw new Error(`the warm-up's ${warmUp.length} events were not delivered`);
        await sleep(100);
      }
      // Stopped only once every warm-up delivery is recorded and no lane holds a slot: nothing is leased
      // or in flight while it is stopped, so nothing of the warm-up is sent again after the reset below.
      await waitForIdleEngine(herald.env.DATABASE_URL!, warmUpDeadline);
      for (const one of started) one.child.kill('SIGSTOP');
      try {
        await publishBacklog();
        await receiver.ask(
          endpointCount === 1 ? { type: 'reset', secret: secrets['/hook'] } : { type: 'reset', secrets },
        );
      } finally {
        for (const one of started) one.child.kill('SIGCONT');
      }
      ready = wallNow();
      // The warm-up's queries are not the backlog's: count from here (the counter prints every 100 ms).
      for (const one of started) readyCounts.set(one.child, queryCounts.get(one.child) ?? 0);
    }
    const cpuNow = () => started.reduce((sum, one) => sum + procSample(one.child.pid!).cpuUs, 0);
    // PostgreSQL backends serving the dispatchers: CPU first seen and last seen, per backend.
    const backends = new Map<number, { first: number; last: number }>();
    const sampleBackends = async (initial: boolean) => {
      const { rows } = await monitor!.query<{ pid: number }>(
        'select pid from pg_stat_activity where application_name = $1',
        [applicationName],
      );
      for (const { pid } of rows) {
        let cpu: number;
        try {
          cpu = procSample(pid).cpuUs;
        } catch {
          continue;
        }
        const seen = backends.get(pid);
        if (seen) seen.last = cpu;
        else backends.set(pid, { first: initial ? cpu : 0, last: cpu });
      }
    };
    const queriesNow = () => [...queryCounts.values()].reduce((sum, n) => sum + n, 0);
    const queries0 = [...readyCounts.values()].reduce((sum, n) => sum + n, 0);
    const cpu0 = cpuNow();
    const machine0 = machineSample();
    await sampleBackends(true);
    let publishing: Promise<SteadyPublish> | undefined;
    if (mode === 'steady') {
      publisher = await createDatabase({ kind: 'postgres', url: herald.env.DATABASE_URL!, poolMax: 16 });
      // Cluster mode's path, as the API's resolver takes it: publishPost without NOTIFY, then the
      // dispatchers woken through Redis after the commit.
      wake = connectOutboxWakePublisher(config.redisUrl, webhookRedisKeys(prefix).outboxWakeChannel);
      publishing = publishSteadily(publisher, herald.orgId, events, steadyRate, steadyNotify ? undefined : wake);
    }
    const pgCpuNow = () => [...backends.values()].reduce((sum, one) => sum + (one.last - one.first), 0);
    /** Where the warm window starts (backlog runs): the figures as of that poll. */
    let warmMark:
      | {
          at: number;
          verified: number;
          cpuUs: number;
          pgCpuUs: number;
          queries: number;
          machine: ReturnType<typeof machineSample>;
        }
      | undefined;
    /** {@link WebhookConfig.traceFanOut}: the monitor polls the run's pending-fan-out queue (its schema) until it is empty. */
    const fanOutSchema =
      config.traceFanOut && mode === 'backlog'
        ? new URL(herald.env.DATABASE_URL!).searchParams.get('options')?.replace('-c search_path=', '')
        : undefined;
    let fanOutDone: { ms: number; verified: number; dispatcherCpuMs: number; pgCpuMs: number } | undefined;
    let stats = await receiver.ask<ReceiverStats>({ type: 'stats' });
    let lastProgress = wallNow();
    let lastVerified = 0;
    let publishFailed = 0;
    void publishing?.then((done) => {
      publishFailed = done.failed;
    });
    while (
      stats.verified < expected - publishFailed * endpointCount &&
      wallNow() - ready < config.dispatcherTimeoutMs + steadyMs
    ) {
      // Near the end, look more often: the CPU windows end at the poll that sees the last delivery.
      await sleep(stats.verified >= expected * 0.9 ? 20 : 100);
      await sampleBackends(false).catch(() => {});
      if (child.exitCode !== null) break;
      stats = await receiver.ask<ReceiverStats>({ type: 'stats' });
      if (fanOutSchema && fanOutDone === undefined) {
        const { rows } = await monitor!.query<{ n: number }>(
          `select count(1)::int as n from ${monitor!.escapeIdentifier(fanOutSchema)}.webhook_outbox_pending`,
        );
        if (rows[0]!.n === 0) {
          fanOutDone = {
            ms: Math.round(wallNow() - ready),
            verified: stats.verified,
            dispatcherCpuMs: Math.round((cpuNow() - cpu0) / 1000),
            pgCpuMs: Math.round(pgCpuNow() / 1000),
          };
          log(`  fan-out done (since ready): ${JSON.stringify(fanOutDone)}`);
        }
      }
      if (mode === 'backlog' && warmMark === undefined && stats.verified >= expected * WARM_FRACTION) {
        warmMark = {
          at: wallNow(),
          verified: stats.verified,
          cpuUs: cpuNow(),
          pgCpuUs: pgCpuNow(),
          queries: queriesNow(),
          machine: machineSample(),
        };
      }
      if (stats.verified > lastVerified) {
        lastVerified = stats.verified;
        lastProgress = wallNow();
      } else if (wallNow() - lastProgress > 15_000) {
        break;
      }
    }
    const cpuUs = started.every((one) => one.child.exitCode === null) ? cpuNow() - cpu0 : Number.NaN;
    const machine = machineCpuSince(machine0, stats.verified);
    const warmMachine = warmMark ? machineCpuSince(warmMark.machine, stats.verified - warmMark.verified) : undefined;
    await sampleBackends(false).catch(() => {});
    await sleep(150);
    const queries = queriesNow() - queries0;
    const pgCpuUs = pgCpuNow();
    const span = stats.lastAt - stats.firstAt;
    const warmDeliveries = warmMark ? stats.verified - warmMark.verified : 0;
    const warm =
      warmMark && warmDeliveries > 0 && stats.lastAt > warmMark.at && Number.isFinite(cpuUs)
        ? {
            deliveries: warmDeliveries,
            deliveriesPerSec: Math.round((warmDeliveries / (stats.lastAt - warmMark.at)) * 1000),
            cpuUsPerDelivery: round((cpuUs - (warmMark.cpuUs - cpu0)) / warmDeliveries, 1),
            pgCpuUsPerDelivery: round((pgCpuUs - warmMark.pgCpuUs) / warmDeliveries, 1),
            queriesPerDelivery: round((queries - (warmMark.queries - queries0)) / warmDeliveries, 3),
            machine: { usPerDelivery: warmMachine!.usPerUnit, busyShare: warmMachine!.busyShare },
          }
        : undefined;
    let latency: SteadyLatency | undefined;
    if (publishing) {
      const published = await publishing;
      const { arrivals } = await receiver.ask<{ arrivals: Array<[string, number]> }>({ type: 'arrivals' });
      const arrived = new Map(arrivals);
      const fromCommit: number[] = [];
      const fromSend: number[] = [];
      const seconds: number[][] = [];
      const firstSent = published.times[0]?.sentAt ?? 0;
      for (const one of published.times) {
        const at = arrived.get(one.postId);
        if (at === undefined) continue;
        fromCommit.push(at - one.committedAt);
        fromSend.push(at - one.sentAt);
        const second = Math.floor((one.sentAt - firstSent) / 1000);
        const inSecond = seconds[second] ?? [];
        seconds[second] = inSecond;
        inSecond.push(at - one.committedAt);
      }
      const worst = seconds
        .map((values, second) => ({ second, p99Ms: percentiles(values ?? []).p99Ms }))
        .filter((one) => Number.isFinite(one.p99Ms))
        .reduce((a, b) => (b.p99Ms > a.p99Ms ? b : a), { second: -1, p99Ms: Number.NEGATIVE_INFINITY });
      latency = {
        eventsPerSec: steadyRate,
        published: published.times.length,
        publishFailed: published.failed,
        publishedPerSec: Math.round((published.times.length / published.durationMs) * 1000),
        fromCommit: percentiles(fromCommit),
        fromSend: percentiles(fromSend),
        publisher: {
          late: percentiles(published.times.map((one) => one.sentAt - one.dueAt)),
          call: percentiles(published.times.map((one) => one.committedAt - one.sentAt)),
        },
        bySecond: {
          firstSecond: percentiles(seconds[0] ?? []),
          afterFirstSecond: percentiles(seconds.slice(1).flatMap((values) => values ?? [])),
          worstSecond: worst,
          p99BySecond: Array.from(seconds, (values) => percentiles(values ?? []).p99Ms),
        },
        stages: await steadyStages(herald.env.DATABASE_URL!, published.times, arrived, endpointCap).catch(
          () => undefined,
        ),
      };
    }
    let order: DispatcherRun['order'];
    if (ordering === 'FIFO') {
      const { arrivals } = await receiver.ask<{ arrivals: Array<[string, number]> }>({ type: 'arrivals' });
      const committed = await outboxPostOrder(herald.env.DATABASE_URL!);
      // Arrivals keep first-arrival order; each event of the outbox must come at the place its sequence
      // number gives it (the whole backlog was committed before the dispatcher started). Checked over the
      // outbox's events, so a missing arrival counts as misplaced too.
      const misplaced = committed.filter((postId, index) => arrivals[index]?.[0] !== postId).length;
      order = { checked: committed.length, misplaced };
    }
    return {
      status: stats.verified >= expected && (order?.misplaced ?? 0) === 0 ? 'ok' : 'incomplete',
      ...(order ? { order } : {}),
      ...(stats.verified < expected
        ? { reason: `${stats.verified} of ${expected} delivered before giving up; ${output.slice(-3).join(' ')}` }
        : order && order.misplaced > 0
          ? { reason: `${order.misplaced} of ${order.checked} events arrived out of outbox order` }
          : {}),
      events: expected,
      verified: stats.verified,
      invalid: stats.invalid,
      duplicate: stats.duplicate,
      deliveriesPerSec: span > 0 ? Math.round((stats.verified / span) * 1000) : 0,
      endToEndPerSec: Math.round((stats.verified / (stats.lastAt - ready)) * 1000),
      cpuUsPerDelivery: round(cpuUs / Math.max(1, stats.verified), 1),
      pgCpuUsPerDelivery: round(pgCpuUs / Math.max(1, stats.verified), 1),
      machine: { usPerDelivery: machine.usPerUnit, busyShare: machine.busyShare },
      queriesPerDelivery: round(queries / Math.max(1, stats.verified), 3),
      ...(warm ? { warm } : {}),
      endpointCap,
      ...(latency ? { latency } : {}),
      samples: stats.invalidSamples,
      attempts: await countAttempts(herald.env.DATABASE_URL!).catch(() => undefined),
      ...(stats.duplicate > 0
        ? {
            duplicates: await explainDuplicates(herald.env.DATABASE_URL!, stats.duplicateSamples).catch(
              (error: unknown) =>
                stats.duplicateSamples.map((sample) => ({
                  ...sample,
                  deliveries: [],
                  error: (error as Error).message,
                })),
            ),
          }
        : {}),
    };
  } catch (error) {
    return { status: 'failed', reason: (error as Error).message.slice(0, 500) };
  } finally {
    await Promise.all(dispatchers.map((child) => stopChild(child)));
    await monitor?.end().catch(() => {});
    await publisher?.close().catch(() => {});
    await wake?.close();
    await herald?.stop();
    const keys = webhookRedisKeys(prefix);
    if (config.redisUrl)
      await redisCommand(config.redisUrl, ['DEL', keys.workStream, keys.deadLetterStream, keys.parkedStream]).catch(
        () => {},
      );
  }
}
