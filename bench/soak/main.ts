/**
 * `pnpm soak`: the whole cluster on this machine under mixed load and scheduled faults, then an exact
 * ledger of every publish, frame and webhook delivery. See bench/README.md ("pnpm soak").
 *
 * Exit codes: 0 balanced; 3 the ledger does not balance (what went where is printed and written);
 * 4 balanced, but a process exited that the fault schedule did not stop; 1 the run itself failed.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { signToken } from '@herald/auth';
import { Histogram, ROOT } from '../src/common.js';
import { type FaultName, type FaultRecord, faultTimes, parseFaults, runFault } from './faults.js';
import { postGraphql } from './http.js';
import { buildImageCommands, type ImageCommands } from './image-build.js';
import { checkLedger, type DeliveryStatus, describeViolations, type LedgerInput, type LedgerResult } from './ledger.js';
import { POSTS_QUERY, type PublishRecord, publishOne, type SoakSubscriber, startSubscriber, tagsFor } from './load.js';
import { type Receiver, type ReceiverBehaviour, startReceiver } from './receivers.js';
import { renderMarkdown, type SoakResults } from './report.js';
import { ResourceSampler, redisKeyKinds, tableSizes } from './resources.js';
import { startTopology, type Topology } from './topology.js';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '10' },
    faults: { type: 'string', default: 'all' },
    out: { type: 'string' },
    rate: { type: 'string', default: '10' },
    subscribers: { type: 'string', default: '45' },
    'drain-seconds': { type: 'string', default: '120' },
    /** `source`: the apps' TypeScript under tsx; `image`: their production builds, as the images run them. */
    processes: { type: 'string', default: 'image' },
    /** Only check the ledger of a run's `ledger-input.json` (or a crafted one), print it, and exit. */
    check: { type: 'string' },
  },
});

const minutes = Number(values.minutes);
const rate = Number(values.rate);
const subscriberCount = Number(values.subscribers);
const drainMs = Number(values['drain-seconds']) * 1000;
if (!(minutes > 0) || !(rate > 0) || !(subscriberCount >= 3) || !(drainMs > 0))
  throw new Error('--minutes, --rate, --drain-seconds must be positive and --subscribers at least 3');
if (values.processes !== 'source' && values.processes !== 'image')
  throw new Error(`--processes is source or image, not "${values.processes}"`);
const faultNames = parseFaults(values.faults);
const runMs = Math.round(minutes * 60_000);
const warmUpMs = Math.min(60_000, Math.round(runMs * 0.15));
const out = values.out ?? join(ROOT, 'bench/results/soak', new Date().toISOString().replaceAll(':', '-').slice(0, 19));
const JWT_SECRET = `soak-${randomUUID()}-${randomUUID()}`;
/** Attempt timeout and retry schedule of the dispatchers: short, so retries and dead letters happen in the run. */
const DISPATCHER_ENV = {
  WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
  WEBHOOK_TIMEOUT_MS: '3000',
  WEBHOOK_RETRY_BASE_MS: '500',
  WEBHOOK_RETRY_HORIZON: `${Math.max(30, Math.round(runMs / 4000))}s`,
  WEBHOOK_POLL_INTERVAL_MS: '250',
};
/** Bursts: this many publishes at once, every sixth of the run (at least every 30 s). */
const BURST_SIZE = 30;
const BURST_EVERY_MS = Math.max(30_000, Math.round(runMs / 6));
/** Steady publishes in flight at most; a tick that finds this many waiting is skipped and counted. */
const MAX_IN_FLIGHT = 16;
/** A subscriber that reconnects on purpose drops its socket about this often. */
const RECONNECT_EVERY_MS = 15_000;
const QUERY_EVERY_MS = 500;
const PROBE_EVERY_MS = 1_000;
/** Load after the last fault ended, at least: its recovery is measured from the probes. */
const CALM_AFTER_FAULTS_MS = 30_000;

const log = (line: string) => {
  const seconds = ((Date.now() - (startedAt || Date.now())) / 1000).toFixed(1).padStart(7);
  process.stdout.write(`[soak ${seconds}s] ${line}\n`);
};
let startedAt = 0;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const unexpectedExits: string[] = [];

let topology: Topology | undefined;
const receivers: Receiver[] = [];
const subscribers: SoakSubscriber[] = [];
let interrupted = false;

async function shutdown(): Promise<void> {
  await Promise.allSettled(subscribers.map((subscriber) => subscriber.client.dispose()));
  await Promise.allSettled(receivers.map((receiver) => receiver.close()));
  await topology?.stop();
}

// The processes of the cluster must never outlive the soak, whatever ends it.
process.on('exit', () => topology?.killNow());
process.on('uncaughtException', (error) => {
  process.stderr.write(`soak: uncaught ${error.stack}\n`);
  topology?.killNow();
  process.exit(1);
});

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    if (interrupted) return;
    interrupted = true;
    process.stderr.write(`\nsoak: ${signal}, stopping every process…\n`);
    setTimeout(() => process.exit(130), 30_000).unref();
    void shutdown().finally(() => process.exit(130));
  });
}

async function main(): Promise<number> {
  const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
  log(`${minutes} min, faults: ${faultNames.join(', ') || 'none'}, ${rate} publishes/s, out ${out}`);
  let commands: ImageCommands | undefined;
  if (values.processes === 'image') {
    // Outside `out` (a pruned node_modules each), removed however the run ends.
    const buildDir = mkdtempSync(join(tmpdir(), 'herald-soak-build-'));
    process.on('exit', () => rmSync(buildDir, { recursive: true, force: true }));
    commands = await buildImageCommands(buildDir);
    log(`production builds of the API and the dispatcher in ${buildDir}`);
  }
  topology = await startTopology({
    commands,
    pods: 3,
    dispatchers: 2,
    jwtSecret: JWT_SECRET,
    // SOAK_NODE_OPTIONS: node options for every pod and dispatcher (a diagnostic preload, a heap-snapshot signal).
    env: {
      ...DISPATCHER_ENV,
      ...(process.env.SOAK_NODE_OPTIONS ? { NODE_OPTIONS: process.env.SOAK_NODE_OPTIONS } : {}),
    },
    onUnexpectedExit: (role, code, signal) => {
      unexpectedExits.push(`${new Date().toISOString()} ${role} exited (code ${code}, signal ${signal})`);
      log(`UNEXPECTED EXIT: ${role} (code ${code}, signal ${signal})`);
    },
  });
  const cluster = topology;
  const httpUrl = () => cluster.nginx.baseUrl;
  const wsUrl = `ws://127.0.0.1:${cluster.nginx.port}/graphql`;
  log(
    `cluster up: nginx ${cluster.nginx.port}, pods ${cluster.podPorts.join(', ')}, PostgreSQL ${cluster.postgresPort}, Redis ${cluster.redisPort}`,
  );

  const orgs = ['a', 'b', 'c'].map((name) => `org-soak-${name}-${randomUUID().slice(0, 8)}`);
  const probeOrg = `org-soak-probe-${randomUUID().slice(0, 8)}`;
  const token = await signToken(
    JWT_SECRET,
    { sub: 'soak', name: 'Soak', orgs: [...orgs, probeOrg] },
    { expiresIn: '48h' },
  );

  // Endpoints of every health, each with a receiver of its own; every one selects post.published.
  const plan: [string, ReceiverBehaviour][] = [
    [orgs[0]!, 'fast'],
    [orgs[0]!, 'slow'],
    [orgs[1]!, 'flaky'],
    [orgs[1]!, 'throttling'],
    [orgs[1]!, 'fifo'],
    [orgs[2]!, 'gone'],
    [orgs[2]!, 'silent'],
    [orgs[2]!, 'away'],
    [probeOrg, 'fast'],
  ];
  const endpoints: { receiver: Receiver; orgId: string; endpointId: string }[] = [];
  for (const [index, [orgId, behaviour]] of plan.entries()) {
    const receiver = await startReceiver(`${orgId === probeOrg ? 'probe' : behaviour}-${index + 1}`, behaviour);
    receivers.push(receiver);
    const created = await postGraphql(
      httpUrl(),
      token,
      'mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } secret } }',
      {
        input: {
          orgId,
          url: receiver.url,
          eventTypes: ['post.published'],
          ...(behaviour === 'fifo' ? { ordering: 'FIFO' } : {}),
        },
      },
    );
    if (!created.data) throw new Error(`createWebhookEndpoint failed: ${JSON.stringify(created.errors)}`);
    receiver.secret = created.data.createWebhookEndpoint.secret as string;
    endpoints.push({ receiver, orgId, endpointId: created.data.createWebhookEndpoint.endpoint.id as string });
  }
  const probeReceiver = receivers[receivers.length - 1]!;
  const awayReceiver = receivers.find((receiver) => receiver.behaviour === 'away')!;

  // Subscribers: per organisation a third without a filter, a third on `red`, a third on `green`/`blue`;
  // every third drops its socket now and then on purpose.
  const sentAt = new Map<string, number>();
  const frameLatency = new Map<number, Histogram>();
  const receiverLatency = new Map<number, Histogram>();
  const recordLatency = (buckets: Map<number, Histogram>, postId: string, at: number) => {
    const sent = sentAt.get(postId);
    if (sent === undefined) return;
    const minute = Math.floor((sent - startedAt) / 60_000);
    const histogram = buckets.get(minute) ?? new Histogram();
    buckets.set(minute, histogram);
    histogram.record((at - sent) * 1000);
  };
  const filters: (string[] | undefined)[] = [undefined, ['red'], ['green', 'blue']];
  for (let index = 0; index < subscriberCount; index++) {
    const orgId = orgs[index % orgs.length]!;
    const tags = filters[Math.floor(index / orgs.length) % filters.length];
    subscribers.push(
      startSubscriber({
        name: `sub-${index + 1}${tags ? `[${tags.join(',')}]` : ''}${index % 3 === 2 ? '~' : ''}`,
        wsUrl,
        httpUrl,
        token,
        orgId,
        ...(tags ? { tags } : {}),
        reconnecting: index % 3 === 2,
        onFrame: (postId, at) => recordLatency(frameLatency, postId, at),
      }),
    );
  }
  const probeFrames = new Map<string, number>();
  const probeSubscriber = startSubscriber({
    name: 'probe',
    wsUrl,
    httpUrl,
    token,
    orgId: probeOrg,
    onFrame: (postId, at) => probeFrames.set(postId, at),
  });
  subscribers.push(probeSubscriber);

  // ---- the load -----------------------------------------------------------------------------------
  startedAt = Date.now();
  const sampler = new ResourceSampler(cluster, startedAt);
  sampler.start();
  const publishes: PublishRecord[] = [];
  const probes: (PublishRecord & { queryOk: boolean })[] = [];
  let n = 0;
  let inFlight = 0;
  let skippedTicks = 0;
  const queries = { ok: 0, failed: 0 };
  const running = new Set<Promise<unknown>>();
  const launch = (promise: Promise<unknown>) => {
    running.add(promise);
    void promise.finally(() => running.delete(promise));
  };
  const publish = (burst: boolean) => {
    const record: PublishRecord = {
      n: n++,
      orgId: orgs[n % orgs.length]!,
      tags: tagsFor(n),
      sentAt: Date.now(),
      ok: false,
      burst,
    };
    publishes.push(record);
    inFlight++;
    launch(
      publishOne(httpUrl(), token, record).then((done) => {
        inFlight--;
        if (done.postId) sentAt.set(done.postId, done.sentAt);
      }),
    );
  };
  const timers: ReturnType<typeof setInterval>[] = [
    setInterval(() => {
      if (inFlight >= MAX_IN_FLIGHT) skippedTicks++;
      else publish(false);
    }, 1000 / rate),
    setInterval(() => {
      log(`burst of ${BURST_SIZE}`);
      for (let i = 0; i < BURST_SIZE; i++) publish(true);
    }, BURST_EVERY_MS),
    setInterval(() => {
      const orgId = orgs[Math.floor(Math.random() * orgs.length)]!;
      launch(
        postGraphql(httpUrl(), token, POSTS_QUERY, { orgId, first: 20 }).then(
          (result) => (result.data ? queries.ok++ : queries.failed++),
          () => queries.failed++,
        ),
      );
    }, QUERY_EVERY_MS),
    setInterval(
      () => {
        const reconnecting = subscribers.filter((subscriber) => subscriber.reconnecting);
        reconnecting[Math.floor(Math.random() * reconnecting.length)]?.dropSocket();
      },
      RECONNECT_EVERY_MS / Math.max(1, Math.ceil(subscriberCount / 3)),
    ),
    setInterval(() => {
      const probe = { n: -1, orgId: probeOrg, tags: [], sentAt: Date.now(), ok: false, burst: false, queryOk: false };
      probes.push(probe);
      launch(
        publishOne(httpUrl(), token, probe).then(async (done) => {
          if (done.postId) sentAt.set(done.postId, done.sentAt);
          const query = await postGraphql(httpUrl(), token, POSTS_QUERY, { orgId: probeOrg, first: 1 }).catch(
            () => undefined,
          );
          probe.queryOk = Boolean(query?.data);
        }),
      );
    }, PROBE_EVERY_MS),
    setInterval(() => {
      const ok = publishes.filter((record) => record.ok).length;
      const frames = subscribers.reduce((total, subscriber) => total + subscriber.frames.length, 0);
      log(
        `${publishes.length} publishes (${ok} ok, ${inFlight} in flight), ${frames} frames, ${queries.ok} queries ok / ${queries.failed} failed`,
      );
    }, 30_000),
  ];

  // ---- the faults --------------------------------------------------------------------------------
  const faults: FaultRecord[] = [];
  const faultRunner = (async () => {
    const times = faultTimes(faultNames.length, runMs, warmUpMs);
    for (const [index, name] of faultNames.entries()) {
      await sleep(Math.max(0, startedAt + times[index]! - Date.now()));
      if (interrupted) return;
      const startAt = Date.now() - startedAt;
      log(`fault ${name} starts`);
      try {
        const detail = await runFault(name as FaultName, {
          topology: cluster,
          awayReceiver,
          awayMs: Math.min(60_000, Math.round(runMs / 10)),
          log,
        });
        faults.push({ name, startAt, endAt: Date.now() - startedAt, detail });
        log(`fault ${name} ends: ${detail}`);
      } catch (error) {
        const message = (error as Error).message.split('\n')[0];
        faults.push({ name, startAt, endAt: Date.now() - startedAt, detail: `FAILED: ${message}` });
        log(`fault ${name} FAILED: ${(error as Error).stack}`);
      }
    }
  })();

  // The load runs for --minutes, and on a slow machine until the last fault has had a calm spell after it
  // (its recovery is measured from the probes the load sends).
  await Promise.all([
    sleep(runMs),
    faultRunner.then(() => (faultNames.length > 0 ? sleep(CALM_AFTER_FAULTS_MS) : undefined)),
  ]);
  for (const timer of timers) clearInterval(timer);
  log('load stopped; waiting for the last requests');
  await Promise.race([Promise.allSettled([...running]), sleep(30_000)]);

  // ---- the drain and the ledger ------------------------------------------------------------------
  const drainStart = Date.now();
  let ledger: LedgerResult;
  let input: LedgerInput;
  for (;;) {
    input = await readLedgerInput(cluster, endpoints, subscribers, publishes, probes);
    ledger = checkLedger(input);
    const waiting = await cluster
      .query<{ count: string }>(
        `select count(*) as count from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id
         where d.status = 'PENDING' and e.url = any($1)`,
        [
          receivers
            .filter((receiver) => ['fast', 'slow', 'away'].includes(receiver.behaviour))
            .map((receiver) => receiver.url),
        ],
      )
      .then((rows) => Number(rows[0]?.count ?? 0))
      .catch(() => -1);
    if ((ledger.balanced && waiting === 0) || Date.now() - drainStart > drainMs) break;
    log(`drain: ${ledger.violations.length} open items, ${waiting} deliveries to healthy receivers pending`);
    await sleep(2_000);
  }
  const drainedMs = Date.now() - drainStart;
  sampler.stop();
  await sampler.sample();

  // Per fault: from its end to the first probe published after it that went every path (publish answered,
  // a query answered, the frame and the webhook arrived).
  const probeArrivals = new Map(
    [...probeReceiver.arrivals.values()].map((arrival) => [arrival.postId, arrival.firstAt]),
  );
  for (const fault of faults) {
    const endAt = startedAt + fault.endAt;
    const healthy = probes.find(
      (probe) =>
        probe.sentAt >= endAt &&
        probe.ok &&
        probe.queryOk &&
        probeFrames.has(probe.postId!) &&
        probeArrivals.has(probe.postId!),
    );
    if (healthy) {
      const recoveredAt = Math.max(probeFrames.get(healthy.postId!)!, probeArrivals.get(healthy.postId!)!);
      fault.recoveredAt = recoveredAt - startedAt;
      fault.recoveryMs = recoveredAt - endAt;
    } else fault.recoveryMs = null;
  }

  const latency = (buckets: Map<number, Histogram>) =>
    [...buckets.entries()]
      .sort(([a], [b]) => a - b)
      .map(([minute, histogram]) => ({ minute, ...histogram.summaryMs() }));
  const results: SoakResults = {
    command: `pnpm soak ${process.argv.slice(2).join(' ')}`.trim(),
    builds: values.processes as 'image' | 'source',
    commit,
    startedAt: new Date(startedAt).toISOString(),
    minutes,
    rate,
    faultsRequested: faultNames,
    drainedMs,
    publishes: {
      attempted: publishes.length + probes.length,
      acknowledged: [...publishes, ...probes].filter((record) => record.ok).length,
      failed: [...publishes, ...probes].filter((record) => !record.ok).length,
      bursts: publishes.filter((record) => record.burst).length,
      skippedTicks,
      committed: ledger.committed,
      failureSamples: publishes
        .filter((record) => record.error)
        .slice(0, 10)
        .map((record) => record.error!),
    },
    probes: { sent: probes.length, ok: probes.filter((probe) => probe.ok).length },
    queries,
    subscribers: {
      count: subscribers.length,
      reconnects: subscribers.reduce((total, subscriber) => total + subscriber.reconnects, 0),
      cursorExpired: subscribers.reduce((total, subscriber) => total + subscriber.expiries.length, 0),
      errors: subscribers
        .flatMap((subscriber) => subscriber.errors.map((error) => `${subscriber.name}: ${error}`))
        .slice(0, 20),
    },
    ledger: { ...ledger, violations: ledger.violations.slice(0, 500) },
    violationCount: ledger.violations.length,
    faults,
    unexpectedExits,
    processes: sampler.figures(warmUpMs),
    redisMemory: sampler.redisMemory,
    redisKeys: (() => {
      try {
        return redisKeyKinds(cluster.redisPort);
      } catch {
        return [];
      }
    })(),
    tables: await tableSizes(cluster).catch(() => []),
    frameLatency: latency(frameLatency),
    receiverLatency: latency(receiverLatency),
  };
  for (const { receiver } of endpoints) {
    if (receiver.behaviour !== 'fast') continue;
    for (const arrival of receiver.arrivals.values()) recordLatency(receiverLatency, arrival.postId, arrival.firstAt);
  }
  results.receiverLatency = latency(receiverLatency);

  await mkdir(out, { recursive: true });
  await writeFile(join(out, 'results.json'), `${JSON.stringify(results, null, 2)}\n`);
  await writeFile(join(out, 'results.md'), renderMarkdown(results));
  await writeFile(join(out, 'ledger-input.json'), JSON.stringify(input));
  log(`results in ${out}`);
  process.stdout.write(`\n${renderMarkdown(results)}\n`);
  if (!ledger.balanced) {
    process.stdout.write(`\nLEDGER DOES NOT BALANCE (${ledger.violations.length} items):\n`);
    for (const line of describeViolations(ledger.violations)) process.stdout.write(`${line}\n`);
    return 3;
  }
  if (unexpectedExits.length > 0) return 4;
  return 0;
}

/** What PostgreSQL holds now and what the subscribers and receivers recorded, as the ledger's input. */
async function readLedgerInput(
  cluster: Topology,
  endpoints: { receiver: Receiver; orgId: string; endpointId: string }[],
  subscriberList: SoakSubscriber[],
  publishes: PublishRecord[],
  probes: PublishRecord[],
): Promise<LedgerInput> {
  const events = await cluster.query<{
    event_id: string;
    seq: string;
    org_id: string;
    post_id: string;
    tags: string[];
  }>(
    `select o.id as event_id, o.seq, o.org_id, p.id as post_id, p.tags
     from webhook_outbox o join posts p on p.id = (o.body::jsonb -> 'data' ->> 'id')
     where o.type = 'post.published'`,
  );
  const published = await cluster.query<{ id: string }>(`select id from posts where status = 'PUBLISHED'`);
  const deliveries = await cluster.query<{ event_id: string; endpoint_id: string; status: DeliveryStatus }>(
    `select event_id, endpoint_id, status from webhook_deliveries where event_type = 'post.published'`,
  );
  const undispatched = await cluster.query<{ id: string }>(
    `select id from webhook_outbox event where type = 'post.published'
       and exists (select 1 from webhook_outbox_pending pending where pending.seq = event.seq)`,
  );
  const stuck = await cluster.query<{ id: string }>(
    `select id from webhook_deliveries where status = 'PENDING' and lease_token like 'a:%'
     and leased_until < now() - interval '60 seconds'`,
  );
  const byEndpoint = new Map<string, { eventId: string; status: DeliveryStatus }[]>();
  for (const row of deliveries) {
    const list = byEndpoint.get(row.endpoint_id) ?? [];
    list.push({ eventId: row.event_id, status: row.status });
    byEndpoint.set(row.endpoint_id, list);
  }
  return {
    events: events.map((row) => ({
      eventId: row.event_id,
      postId: row.post_id,
      orgId: row.org_id,
      seq: Number(row.seq),
      tags: row.tags,
    })),
    publishedPosts: published.map((row) => row.id),
    acknowledged: [...publishes, ...probes].filter((record) => record.ok).map((record) => record.postId!),
    subscribers: subscriberList.map((subscriber) => ({
      name: subscriber.name,
      orgId: subscriber.orgId,
      ...(subscriber.tags ? { tags: subscriber.tags } : {}),
      frames: subscriber.frames,
      expiries: subscriber.expiries,
      reconciled: [...subscriber.reconciled],
    })),
    endpoints: endpoints.map(({ receiver, orgId, endpointId }) => ({
      name: receiver.name,
      behaviour: receiver.behaviour,
      endpointId,
      orgId,
      deliveries: byEndpoint.get(endpointId) ?? [],
      ...(receiver.behaviour === 'fifo' ? { ordered: true } : {}),
      // In the order each event was first seen.
      received: [...receiver.arrivals.values()].map(({ eventId, postId, copies }) => ({ eventId, postId, copies })),
      invalid: receiver.invalid,
      invalidSamples: receiver.invalidSamples,
    })),
    undispatched: undispatched.map((row) => row.id),
    leasedPastBound: stuck.map((row) => row.id),
  };
}

/** `--check FILE`: the ledger of a saved input, exit 0 when it balances and 3 when it does not. */
async function checkOnly(file: string): Promise<number> {
  const ledger = checkLedger(JSON.parse(await readFile(file, 'utf8')) as LedgerInput);
  process.stdout.write(`committed publishes: ${ledger.committed}\n`);
  for (const tally of ledger.endpoints)
    process.stdout.write(
      `${tally.name}: selected ${tally.selected} = succeeded ${tally.succeeded} + DEAD ${tally.dead} + scheduled ${tally.scheduled} + skipped ${tally.skipped} + unaccounted ${tally.unaccounted}\n`,
    );
  if (ledger.balanced) {
    process.stdout.write('ledger balanced\n');
    return 0;
  }
  process.stdout.write(`LEDGER DOES NOT BALANCE (${ledger.violations.length} items):\n`);
  for (const line of describeViolations(ledger.violations)) process.stdout.write(`${line}\n`);
  return 3;
}

let code = 1;
try {
  code = values.check ? await checkOnly(values.check) : await main();
} catch (error) {
  process.stderr.write(`soak failed: ${(error as Error).stack}\n`);
  code = 1;
} finally {
  await shutdown().catch(() => {});
}
process.exit(code);
