/**
 * `pnpm bench --scenarios noisy-neighbour`: what organisation A's storm costs organisation B, on every
 * path, in cluster mode (one API pod, one webhook dispatcher, PostgreSQL, Redis) with the default quotas.
 *
 * For each path B is measured alone, then while A storms past its quotas from its own process at a
 * lower priority (A's clients are not on the server's machine in real life; `--noisy-storm-priority`:
 * `nice -n 10`, or `idle`, Linux's SCHED_IDLE class, which runs it only on CPU time nothing else wants):
 * - HTTP: B sends `posts(first: 10)` every 50 ms; A runs 64 keep-alive request loops.
 * - subscriptions: B publishes every 100 ms to its 10 subscribed sockets (publish → `next`); A holds
 *   1,000 subscribed sockets (10 users, each within its socket cap) and publishes from 8 loops.
 * - webhooks: B's endpoint gets one post every 250 ms (publish → receiver); A has 20 endpoints on a slow
 *   receiver (100 ms per request) and a backlog of 20 deliveries per post × 1,000 posts. A's attempts in
 *   flight are counted at its receiver, against `TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT`.
 * - refusal cost: the API pod's CPU per refused request beside its CPU per served `posts(first: 10)`.
 * Nothing lost: B's sockets and endpoint get every event, and A's backlog drains completely.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { signToken } from '@herald/auth';
import { createClient } from 'graphql-ws';
import pg from 'pg';
import { WebSocket } from 'ws';
import { type ApiProcess, startApiProcess } from '../../test/support/api-process.js';
import { type DispatcherProcess, startDispatcherProcess } from '../../test/support/dispatcher-process.js';
import { Histogram, type LatencySummary, procSample, ROOT, round, sleep } from './common.js';
import type { StormCounts } from './noisy-storm.js';
import { createBenchSchema } from './schema.js';

const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const JWT_SECRET = 'noisy-neighbour-bench-secret-0123456789abcdef';
/** A's attempts in flight, all dispatchers together; set explicitly so the figure is read against it. */
const ORG_IN_FLIGHT_CAP = 50;
const A_ENDPOINTS = 20;
const A_BACKLOG_POSTS = 1_000;
const SLOW_RECEIVER_MS = 100;
/**
 * How A's storm process gives way to the server's processes on a machine they share: `nice` (niceness 10:
 * a smaller share, but it still takes its time slices beside them) or `idle` (SCHED_IDLE: it runs only on
 * CPU time no other process wants, the nearest this machine comes to A's clients being elsewhere).
 */
export const STORM_PRIORITIES = ['nice', 'idle'] as const;
export type StormPriority = (typeof STORM_PRIORITIES)[number];
const STORM_PRIORITY_WORDS: Record<StormPriority, string> = {
  nice: 'at niceness 10 (`--noisy-storm-priority nice`)',
  idle: 'in the SCHED_IDLE class (`--noisy-storm-priority idle`: only on CPU time nothing else wanted)',
};
const STORM_LAUNCHERS: Record<StormPriority, readonly string[]> = {
  nice: ['nice', '-n', '10'],
  idle: ['chrt', '--idle', '0'],
};
const B_SOCKETS = 10;
/** A's subscribers: 1,000 sockets of 10 users, each user within its default cap of 100 sockets. */
const A_SOCKETS = 1_000;
const A_SOCKET_USERS = 10;

const POSTS = 'query($orgId: ID!) { posts(orgId: $orgId, first: 10) { edges { node { id title } } } }';
const CREATE = 'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }';
const PUBLISH = 'mutation($id: ID!) { publishPost(id: $id) { id } }';
const SUBSCRIBE = 'subscription($orgId: ID!) { postPublished(orgId: $orgId) { id title } }';
const SET_LIMITS =
  'mutation($orgId: ID!, $limits: OrganizationLimitsInput!) { setOrganizationLimits(orgId: $orgId, limits: $limits) { orgId } }';
const CREATE_ENDPOINT =
  'mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }';

export interface NoisyOptions {
  databaseUrl: string;
  redisUrl: string;
  /** How long each probe of B runs, alone and under the storm. */
  probeMs: number;
  /** How A's storm process yields the CPU to the server's processes ({@link STORM_PRIORITIES}). @default 'nice' */
  stormPriority?: StormPriority;
  log: (line: string) => void;
}

export interface PathFigures {
  alone: LatencySummary;
  storm: LatencySummary;
  /** A's side of the storm. */
  stormCounts: Record<string, number>;
  /** The goal for B's p99 under the storm, and whether it was met. */
  goalP99Ms: number;
  met: boolean;
}

export interface NoisyResult {
  http: PathFigures;
  subscriptions: PathFigures & { bMissing: number };
  webhooks: PathFigures & {
    aMaxInFlight: number;
    aInFlightCap: number;
    aDelivered: number;
    aExpected: number;
    bMissing: number;
    /** Where B's probes spent their time, alone and under A's backlog (absent: not read). */
    bStages?: { alone?: WebhookStages; storm?: WebhookStages };
  };
  refusal: { refusedCpuUs: number; servedCpuUs: number; refused: number; served: number };
  /** How A's storm process gave way to the server's (older results: `nice`). */
  stormPriority?: StormPriority;
}

/** Runs the scenario; every process it starts is stopped before it returns. */
export async function runNoisyNeighbour(options: NoisyOptions): Promise<NoisyResult> {
  const { log } = options;
  const schema = await createBenchSchema(options.databaseUrl);
  const orgA = `org-a-${randomUUID().slice(0, 8)}`;
  const orgB = `org-b-${randomUUID().slice(0, 8)}`;
  const env = {
    DATABASE_URL: schema.url,
    REDIS_URL: options.redisUrl,
    HERALD_REDIS_PREFIX: `bench-noisy-${randomUUID()}:`,
    JWT_SECRET,
    WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
    TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT: String(ORG_IN_FLIGHT_CAP),
  };
  let api: ApiProcess | undefined;
  let dispatcher: DispatcherProcess | undefined;
  const receivers: Receiver[] = [];
  try {
    api = await startApiProcess(env);
    dispatcher = await startDispatcherProcess(env);
    const baseUrl = api.baseUrl;
    const tokenA = await signToken(JWT_SECRET, { sub: 'user-a', orgs: [orgA] }, { expiresIn: '2h' });
    const tokenB = await signToken(JWT_SECRET, { sub: 'user-b', orgs: [orgB] }, { expiresIn: '2h' });
    const admin = await signToken(JWT_SECRET, { sub: 'ops', roles: ['herald:admin'] }, { expiresIn: '2h' });
    const call = (token: string, query: string, variables: Record<string, unknown>) =>
      graphql(baseUrl, token, query, variables);
    const stormPriority = options.stormPriority ?? 'nice';
    const storm = (order: Record<string, unknown>) =>
      startStorm(stormPriority, { baseUrl, token: tokenA, orgId: orgA, ...order });

    // --- HTTP ---------------------------------------------------------------------------------------
    for (let i = 0; i < 10; i++) await call(tokenB, CREATE, { input: { orgId: orgB, title: `b ${i}` } });
    const probeHttp = async () => {
      const histogram = new Histogram();
      const until = Date.now() + options.probeMs;
      while (Date.now() < until) {
        const started = performance.now();
        const answer = await call(tokenB, POSTS, { orgId: orgB });
        if (answer.status !== 200 || answer.body?.errors)
          throw new Error(`B's query failed: ${JSON.stringify(answer.body)}`);
        histogram.record((performance.now() - started) * 1000);
        await sleep(50);
      }
      return histogram.summaryMs();
    };
    log('noisy-neighbour: HTTP, B alone');
    const httpAlone = await probeHttp();
    log('noisy-neighbour: HTTP, B under A’s storm (64 request loops)');
    const httpStorm = storm({ mode: 'http', loops: 64, durationMs: options.probeMs + 2_000 });
    await sleep(1_000);
    const httpUnder = await probeHttp();
    const httpCounts = await httpStorm;
    const http = figures(httpAlone, httpUnder, httpCounts, Math.max(1.5 * httpAlone.p99Ms, httpAlone.p99Ms + 10));

    // --- subscriptions ------------------------------------------------------------------------------
    const bSockets = await subscribeAll(baseUrl, tokenB, orgB, B_SOCKETS);
    const probeFanout = async (label: string) => {
      const histogram = new Histogram();
      const until = Date.now() + options.probeMs;
      let published = 0;
      while (Date.now() < until) {
        const created = await call(tokenB, CREATE, { input: { orgId: orgB, title: `${label} ${published}` } });
        const id = created.body?.data?.createPost?.id as string | undefined;
        if (!id) throw new Error(`B's createPost failed: ${JSON.stringify(created.body)}`);
        const arrivals = bSockets.expect(id);
        const started = performance.now();
        const answer = await call(tokenB, PUBLISH, { id });
        if (answer.body?.errors) throw new Error(`B's publish failed: ${JSON.stringify(answer.body)}`);
        published++;
        for (const at of await arrivals) histogram.record((at - started) * 1000);
        await sleep(100);
      }
      return histogram.summaryMs();
    };
    log('noisy-neighbour: subscriptions, B alone');
    const subAlone = await probeFanout('alone');
    log('noisy-neighbour: subscriptions, B under A’s storm (1,000 sockets, 8 publish loops)');
    const socketTokens = await Promise.all(
      Array.from({ length: A_SOCKET_USERS }, (_, i) =>
        signToken(JWT_SECRET, { sub: `user-a-${i}`, orgs: [orgA] }, { expiresIn: '2h' }),
      ),
    );
    const subStorm = storm({
      mode: 'fanout',
      loops: 8,
      sockets: A_SOCKETS,
      socketTokens,
      durationMs: options.probeMs + 5_000,
    });
    await sleep(3_000);
    const subUnder = await probeFanout('storm');
    const subCounts = await subStorm;
    const bMissing = bSockets.missing();
    bSockets.close();
    const subscriptions = {
      ...figures(subAlone, subUnder, subCounts, Math.max(1.5 * subAlone.p99Ms, subAlone.p99Ms + 25)),
      bMissing,
    };

    // --- webhooks -----------------------------------------------------------------------------------
    const slow = await startReceiver(SLOW_RECEIVER_MS);
    const fast = await startReceiver(0);
    receivers.push(slow, fast);
    for (let i = 0; i < A_ENDPOINTS; i++) {
      await call(tokenA, CREATE_ENDPOINT, {
        input: { orgId: orgA, url: `${slow.url}/a/${i}`, eventTypes: ['post.published'] },
      });
    }
    await call(tokenB, CREATE_ENDPOINT, {
      input: { orgId: orgB, url: `${fast.url}/b`, eventTypes: ['post.published'] },
    });
    // Each probe's times on the wall clock (ms), for the stages read from the database afterwards.
    const probeTimes: Record<'alone' | 'storm', WebhookProbe[]> = { alone: [], storm: [] };
    const probeWebhooks = async (label: 'alone' | 'storm', count: number) => {
      const histogram = new Histogram();
      for (let i = 0; i < count; i++) {
        const created = await call(tokenB, CREATE, { input: { orgId: orgB, title: `${label} hook ${i}` } });
        const id = created.body.data.createPost.id as string;
        const arrived = fast.expect(id);
        const started = performance.now();
        await call(tokenB, PUBLISH, { id });
        const answered = performance.now();
        const at = await arrived;
        if (Number.isFinite(at)) {
          histogram.record((at - started) * 1000);
          const wall = (t: number) => performance.timeOrigin + t;
          probeTimes[label].push({ postId: id, started: wall(started), answered: wall(answered), arrived: wall(at) });
        }
        await sleep(250);
      }
      return histogram.summaryMs();
    };
    const probes = Math.max(10, Math.round(options.probeMs / 300));
    const stagesUnread = (error: unknown) => {
      log(`noisy-neighbour: B's webhook stages not read: ${error instanceof Error ? error.message : String(error)}`);
      return undefined;
    };
    log('noisy-neighbour: webhooks, B alone');
    const hookAlone = await probeWebhooks('alone', probes);
    log(`noisy-neighbour: webhooks, A's backlog (${A_BACKLOG_POSTS} posts × ${A_ENDPOINTS} endpoints)`);
    // A's backlog is committed through the API, its publish quota lifted by an administrator meanwhile.
    await call(admin, SET_LIMITS, { orgId: orgA, limits: { publishesPerSecond: 0, operationsPerSecond: 0 } });
    const backlog = await startStorm(stormPriority, {
      baseUrl,
      token: tokenA,
      orgId: orgA,
      mode: 'fanout',
      loops: 8,
      sockets: 0,
      durationMs: 600_000,
      stopAfter: A_BACKLOG_POSTS,
    });
    const published = backlog.published ?? 0;
    await call(admin, SET_LIMITS, { orgId: orgA, limits: { publishesPerSecond: null, operationsPerSecond: null } });
    await waitUntil(() => slow.arrivals > 200, 60_000);
    log('noisy-neighbour: webhooks, B under A’s backlog');
    const hookUnder = await probeWebhooks('storm', probes);
    const aExpected = published * A_ENDPOINTS;
    log(`noisy-neighbour: draining A's backlog (${aExpected} deliveries)`);
    await waitUntil(() => slow.distinct() >= aExpected, 600_000).catch(() => undefined);
    const webhooks = {
      ...figures(
        hookAlone,
        hookUnder,
        { published, aDeliveries: aExpected },
        Math.max(2 * hookAlone.p99Ms, hookAlone.p99Ms + 50),
      ),
      aMaxInFlight: slow.maxInFlight,
      aInFlightCap: ORG_IN_FLIGHT_CAP,
      aDelivered: slow.distinct(),
      aExpected,
      bMissing: fast.pending(),
      bStages: {
        alone: await webhookStages(schema.url, probeTimes.alone).catch(stagesUnread),
        storm: await webhookStages(schema.url, probeTimes.storm).catch(stagesUnread),
      },
    };

    // --- the cost of a refusal ----------------------------------------------------------------------
    const orgC = `org-c-${randomUUID().slice(0, 8)}`;
    const orgD = `org-d-${randomUUID().slice(0, 8)}`;
    const tokenCD = await signToken(JWT_SECRET, { sub: 'user-cd', orgs: [orgC, orgD] }, { expiresIn: '2h' });
    await call(admin, SET_LIMITS, { orgId: orgC, limits: { operationsPerSecond: 1 } });
    await call(admin, SET_LIMITS, { orgId: orgD, limits: { operationsPerSecond: 0 } });
    for (let i = 0; i < 10; i++) await call(tokenCD, CREATE, { input: { orgId: orgD, title: `d ${i}` } });
    const cpuPer = async (orgId: string, expectRefused: boolean) => {
      const pid = api!.child.pid!;
      let counted = 0;
      const before = procSample(pid).cpuUs;
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          for (let i = 0; i < 1_000; i++) {
            const answer = await call(tokenCD, POSTS, { orgId });
            if ((answer.status === 429) === expectRefused) counted++;
          }
        }),
      );
      return { cpuUs: round((procSample(pid).cpuUs - before) / 4_000, 1), counted };
    };
    await cpuPer(orgD, false); // warm-up
    const served = await cpuPer(orgD, false);
    const refused = await cpuPer(orgC, true);
    const refusal = {
      refusedCpuUs: refused.cpuUs,
      servedCpuUs: served.cpuUs,
      refused: refused.counted,
      served: served.counted,
    };

    return { http, subscriptions, webhooks, refusal, stormPriority };
  } finally {
    for (const receiver of receivers) receiver.close();
    await dispatcher?.stop('SIGTERM').catch(() => undefined);
    await api?.stop('SIGTERM').catch(() => undefined);
    await schema.drop().catch(() => undefined);
  }
}

function figures(alone: LatencySummary, storm: LatencySummary, counts: object, goalP99Ms: number): PathFigures {
  return {
    alone,
    storm,
    stormCounts: counts as Record<string, number>,
    goalP99Ms: round(goalP99Ms, 1),
    met: storm.p99Ms <= goalP99Ms,
  };
}

async function graphql(
  baseUrl: string,
  token: string,
  query: string,
  variables: Record<string, unknown>,
): Promise<{ status: number; body: any }> {
  const response = await fetch(`${baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  return { status: response.status, body: await response.json().catch(() => undefined) };
}

/** Starts A's storm in its own process at a lower priority; resolves with its counts when it ends. */
async function startStorm(priority: StormPriority, order: Record<string, unknown>): Promise<StormCounts> {
  const [command, ...flags] = STORM_LAUNCHERS[priority];
  const child = spawn(
    command as string,
    [...flags, process.execPath, '--import', TSX_LOADER, 'bench/src/noisy-storm.ts', JSON.stringify(order)],
    {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    out += chunk;
  });
  const [code] = await once(child, 'exit');
  if (code !== 0) throw new Error(`the storm process exited with ${code}`);
  return JSON.parse(out.trim().split('\n').pop() ?? '{}') as StormCounts;
}

async function waitUntil(check: () => boolean, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error('timed out');
    await sleep(50);
  }
}

/** B's sockets: when each post's frame arrived on each of them. */
async function subscribeAll(baseUrl: string, token: string, orgId: string, count: number) {
  const waiting = new Map<string, { arrivals: number[]; resolve: (at: number[]) => void }>();
  let missing = 0;
  const clients = Array.from({ length: count }, () =>
    createClient({
      url: `${baseUrl.replace('http', 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { authToken: token },
    }),
  );
  let ready = 0;
  for (const client of clients) {
    client.on('connected', () => ready++);
    client.subscribe(
      { query: SUBSCRIBE, variables: { orgId } },
      {
        next: (result) => {
          const id = (result.data as { postPublished?: { id: string } } | undefined)?.postPublished?.id;
          const entry = id ? waiting.get(id) : undefined;
          if (!entry) return;
          entry.arrivals.push(performance.now());
          if (entry.arrivals.length === count) {
            waiting.delete(id!);
            entry.resolve(entry.arrivals);
          }
        },
        error: () => {},
        complete: () => {},
      },
    );
  }
  await waitUntil(() => ready === count, 30_000);
  await sleep(500);
  return {
    /** Resolves with the arrival times on every socket (or those that came within 10 s). */
    expect(id: string): Promise<number[]> {
      return new Promise((resolve) => {
        const entry = { arrivals: [] as number[], resolve };
        waiting.set(id, entry);
        setTimeout(() => {
          if (!waiting.has(id)) return;
          waiting.delete(id);
          missing += count - entry.arrivals.length;
          resolve(entry.arrivals);
        }, 10_000);
      });
    },
    missing: () => missing,
    close: () => {
      for (const client of clients) void Promise.resolve(client.dispose()).catch(() => {});
    },
  };
}

/** One probe of B's webhook path, on the wall clock (ms). */
interface WebhookProbe {
  postId: string;
  started: number;
  /** publishPost's answer reached B. */
  answered: number;
  /** The delivery reached B's receiver. */
  arrived: number;
}

/** p50 / p99 / max ms of each stage of B's probes (the slowest probe's stages apart). */
export interface WebhookStages {
  probes: number;
  publish: StagePercentiles;
  answerToFanOut: StagePercentiles;
  fanOutToPost: StagePercentiles;
  postToReceiver: StagePercentiles;
  /** The slowest probe end to end, stage by stage (ms). */
  slowest: {
    totalMs: number;
    publishMs: number;
    answerToFanOutMs: number;
    fanOutToPostMs: number;
    postToReceiverMs: number;
  };
}

interface StagePercentiles {
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

function stagePercentiles(values: number[]): StagePercentiles {
  const sorted = [...values].sort((a, b) => a - b);
  // Nearest rank, as Histogram's percentiles (common.ts): of 100 probes, p99 is the 99th.
  const at = (q: number) => round(sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN, 1);
  return { p50Ms: at(0.5), p99Ms: at(0.99), maxMs: round(sorted.at(-1) ?? Number.NaN, 1) };
}

/**
 * Splits each probe's publish → receiver into: publishPost over HTTP (sent → answered), answered → the
 * dispatcher's fan-out of the event (its delivery's `created_at`), fan-out → the attempt's POST began (its `at`),
 * POST began → the receiver read it. The database's times and ours are the same machine's wall clock.
 */
async function webhookStages(databaseUrl: string, probes: WebhookProbe[]): Promise<WebhookStages | undefined> {
  if (probes.length === 0) return undefined;
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ post_id: string; fanned_out: string; post_at: string }>(
      `select event.body::json->'data'->>'id' as post_id,
         extract(epoch from delivery.created_at) * 1000 as fanned_out,
         extract(epoch from attempt.at) * 1000 as post_at
       from webhook_outbox event
       join webhook_deliveries delivery on delivery.event_id = event.id
       cross join lateral (
         select at from webhook_attempt_log where delivery_id = delivery.id order by at limit 1
       ) attempt
       where event.type = 'post.published' and event.body::json->'data'->>'id' = any($1)`,
      [probes.map((probe) => probe.postId)],
    );
    const byPost = new Map(
      rows.map((row) => [row.post_id, { fannedOut: Number(row.fanned_out), postAt: Number(row.post_at) }]),
    );
    const split = probes.flatMap((probe) => {
      const at = byPost.get(probe.postId);
      if (!at) return [];
      return [
        {
          totalMs: probe.arrived - probe.started,
          publishMs: probe.answered - probe.started,
          answerToFanOutMs: at.fannedOut - probe.answered,
          fanOutToPostMs: at.postAt - at.fannedOut,
          postToReceiverMs: probe.arrived - at.postAt,
        },
      ];
    });
    if (split.length === 0) return undefined;
    const slowest = split.reduce((worst, one) => (one.totalMs > worst.totalMs ? one : worst));
    return {
      probes: split.length,
      publish: stagePercentiles(split.map((one) => one.publishMs)),
      answerToFanOut: stagePercentiles(split.map((one) => one.answerToFanOutMs)),
      fanOutToPost: stagePercentiles(split.map((one) => one.fanOutToPostMs)),
      postToReceiver: stagePercentiles(split.map((one) => one.postToReceiverMs)),
      slowest: {
        totalMs: round(slowest.totalMs, 1),
        publishMs: round(slowest.publishMs, 1),
        answerToFanOutMs: round(slowest.answerToFanOutMs, 1),
        fanOutToPostMs: round(slowest.fanOutToPostMs, 1),
        postToReceiverMs: round(slowest.postToReceiverMs, 1),
      },
    };
  } finally {
    await client.end().catch(() => {});
  }
}

interface Receiver {
  url: string;
  arrivals: number;
  maxInFlight: number;
  distinct(): number;
  /** Resolves with the arrival time of the first delivery naming post `id` (NaN: none within 60 s). */
  expect(id: string): Promise<number>;
  /** Posts expected that never arrived. */
  pending(): number;
  close(): void;
}

/** A webhook receiver that answers 200 after `delayMs`, counting requests in flight and distinct events. */
async function startReceiver(delayMs: number): Promise<Receiver> {
  const events = new Set<string>();
  const waiting = new Map<string, (at: number) => void>();
  let inFlight = 0;
  let missed = 0;
  const receiver: Receiver = {
    url: '',
    arrivals: 0,
    maxInFlight: 0,
    distinct: () => events.size,
    expect: (id) =>
      new Promise((resolve) => {
        waiting.set(id, resolve);
        setTimeout(() => {
          if (!waiting.delete(id)) return;
          missed++;
          resolve(Number.NaN);
        }, 60_000);
      }),
    pending: () => missed,
    close: () => server.close(),
  };
  const server: Server = createServer((request: IncomingMessage, response) => {
    const at = performance.now();
    receiver.arrivals++;
    inFlight++;
    receiver.maxInFlight = Math.max(receiver.maxInFlight, inFlight);
    let body = '';
    request.setEncoding('utf8').on('data', (chunk: string) => {
      body += chunk;
    });
    request.on('end', () => {
      try {
        const event = JSON.parse(body) as { id: string; data?: { id?: string } };
        events.add(`${request.url} ${event.id}`);
        const postId = event.data?.id;
        const resolve = postId ? waiting.get(postId) : undefined;
        if (resolve) {
          waiting.delete(postId!);
          resolve(at);
        }
      } catch {
        // not JSON: still answered
      }
      setTimeout(() => {
        inFlight--;
        response.writeHead(200).end();
      }, delayMs);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return receiver;
}

/** The scenario's table, for results.md. */
export function noisyMarkdown(result: NoisyResult): string {
  const row = (path: string, figures: PathFigures, storm: string) =>
    `| ${path} | ${figures.alone.p50Ms} / ${figures.alone.p99Ms} | ${figures.storm.p50Ms} / ${figures.storm.p99Ms} | ≤ ${figures.goalP99Ms} ${figures.met ? '✓' : '✗'} | ${storm} |`;
  const http = result.http.stormCounts;
  const sub = result.subscriptions.stormCounts;
  const hooks = result.webhooks;
  return [
    '| B’s path | B alone p50 / p99 ms | B under A’s storm p50 / p99 ms | goal for the p99 | A’s storm |',
    '|---|---:|---:|---|---|',
    row(
      'HTTP `posts(first: 10)` every 50 ms',
      result.http,
      `${http.ok} served, ${http.refused} refused (429), ${http.failed} failed`,
    ),
    row(
      `subscriptions, publish → \`next\` (${B_SOCKETS} sockets)`,
      result.subscriptions,
      `${sub.admitted} of ${A_SOCKETS} sockets admitted; ${sub.published} publishes committed, ${sub.refused} refused, ${sub.frames} of ${sub.published! * sub.admitted!} frames received; B missed ${result.subscriptions.bMissing}`,
    ),
    row(
      'webhooks, publish → receiver',
      hooks,
      `${hooks.aExpected} deliveries on ${A_ENDPOINTS} slow endpoints; at most ${hooks.aMaxInFlight} in flight (cap ${hooks.aInFlightCap}); ${hooks.aDelivered}/${hooks.aExpected} delivered; B missed ${hooks.bMissing}`,
    ),
    ...(['alone', 'storm'] as const).flatMap((when) => {
      const stages = hooks.bStages?.[when];
      if (!stages) return [];
      const one = (name: string, p: StagePercentiles) => `${name} ${p.p50Ms} / ${p.p99Ms} / ${p.maxMs}`;
      const worst = stages.slowest;
      return [
        '',
        `B's webhook probes ${when === 'alone' ? 'alone' : 'under A’s backlog'}, stages p50 / p99 / max ms (${stages.probes} probes): ` +
          [
            one('publishPost sent → answered', stages.publish),
            one('answered → dispatcher fan-out', stages.answerToFanOut),
            one('fan-out → POST began (stream, lane, claim)', stages.fanOutToPost),
            one('POST began → receiver', stages.postToReceiver),
          ].join('; ') +
          `; the slowest probe (${worst.totalMs} ms): ${worst.publishMs} + ${worst.answerToFanOutMs} + ${worst.fanOutToPostMs} + ${worst.postToReceiverMs}.`,
      ];
    }),
    '',
    `A's storm ran in its own process ${STORM_PRIORITY_WORDS[result.stormPriority ?? 'nice']}.`,
    '',
    `Cost of a refusal: ${result.refusal.refusedCpuUs} µs of API CPU per refused request (${result.refusal.refused}/4000 refused) beside ${result.refusal.servedCpuUs} µs per served \`posts(first: 10)\` (${result.refusal.served}/4000 served).`,
  ].join('\n');
}
