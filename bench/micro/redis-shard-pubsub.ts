/**
 * How many sharded pub/sub messages one Redis shard sends (docs/scaling.md, "One Redis shard (pub/sub)"):
 * one redis-server (REDIS_URL, a plain standalone server ≥ 7 by default), `channels` shard channels named
 * like Herald's (`post-published:{org-N}`, under a prefix unique to the run), and for each
 * `connectionsPerChannel` setting that many subscriber connections, each SSUBSCRIBEd to every channel, so
 * each SPUBLISH reaches that many connections. `publishers` other connections then send `pipeline`
 * SPUBLISHes of a `bytes`-byte entry over random channels, wait for the replies and start again, for
 * `seconds` (and at most a million SPUBLISHes a second, so the loop always ends).
 *
 * Per setting it prints one line:
 * - SPUBLISH/s and messages/s (received by the subscribers, counted on ioredis's `smessage` event), both
 *   over the time from the first SPUBLISH until the last message arrived;
 * - the CPU of redis-server (whole process from /proc/<pid>/stat, its main thread from
 *   /proc/<pid>/schedstat) and of this process (`process.cpuUsage()`, and its main thread) over the same
 *   time, as % of one core. A main thread near 100 % was the limit, and the line says which. "Waited for
 *   a CPU" is a main thread's time runnable but not running (schedstat's second field): when it is large
 *   the machine was busy with other work, neither process is a limit, and the figures say little;
 * - how many messages arrived of those Redis counted as sent (the sum of the SPUBLISH replies), after
 *   waiting up to 5 s for the rest, and how many subscriber connections Redis closed (it closes one whose
 *   output buffer passes `client-output-buffer-limit pubsub`; they are not reopened).
 *
 * Every subscriber connection lives in this one Node process, and the publishers too. redis-server's CPU
 * is read only when it runs on this machine. Pub/sub stores no keys: nothing is left to clean up.
 *
 *   node --import tsx bench/micro/redis-shard-pubsub.ts [channels=200] [connectionsPerChannel=17,60] [seconds=5] [publishers=8] [pipeline=50] [bytes=290]
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { relative } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createRedisClient, isCluster, type RedisClient } from '../../packages/config/src/redis.js';

/** A standalone ioredis client (what {@link connect} returns once it has refused a cluster). */
type Redis = Awaited<ReturnType<typeof connect>>;

const args = process.argv.slice(2);
const CHANNELS = positiveInt(args[0] ?? '200', 'channels');
const SETTINGS = (args[1] ?? '17,60').split(',').map((value) => positiveInt(value, 'connectionsPerChannel'));
const SECONDS = positiveNumber(args[2] ?? '5', 'seconds');
const PUBLISHERS = positiveInt(args[3] ?? '8', 'publishers');
const PIPELINE = positiveInt(args[4] ?? '50', 'pipeline');
const BYTES = positiveInt(args[5] ?? '290', 'bytes');
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const DRAIN_LIMIT_MS = 5_000;
const MAX_SPUBLISH_PER_SECOND = 1_000_000;
/** A main thread at this % of a core or more is taken as the limit (Redis serves all commands on one). */
const LIMIT_PERCENT = 90;
const PREFIX = `bench-shard-${process.pid}-${Date.now()}:`;
const channels = Array.from({ length: CHANNELS }, (_, i) => `${PREFIX}post-published:{org-${i}}`);
const out = (line: string) => process.stdout.write(`${line}\n`);

function positiveNumber(text: string, name: string): number {
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) fail(`${name} must be a positive number, got "${text}"`);
  return value;
}

function positiveInt(text: string, name: string): number {
  const value = positiveNumber(text, name);
  if (!Number.isInteger(value)) fail(`${name} must be a whole number, got "${text}"`);
  return value;
}

function fail(message: string): never {
  process.stderr.write(`redis-shard-pubsub: ${message}\n`);
  process.exit(1);
}

/** Three significant digits with thousands separators: 25,300 and 430,000. */
function rate(value: number): string {
  return Number(value.toPrecision(3)).toLocaleString('en-US');
}

const count = (value: number) => value.toLocaleString('en-US');

/** A history-entry-like JSON text of exactly `bytes` bytes (ASCII), or plain filler when that is too short. */
function payload(bytes: number): string {
  const head = '{"type":"post-published","orgId":"org-1","postId":"post-1","title":"';
  const tail = '"}';
  if (bytes < head.length + tail.length) return 'x'.repeat(bytes);
  return `${head}${'x'.repeat(bytes - head.length - tail.length)}${tail}`;
}

/** A connection to REDIS_URL that gives up at once instead of retrying, so an unreachable server is one error. */
async function connect(name: string) {
  const client: RedisClient = createRedisClient(REDIS_URL, {
    lazyConnect: true,
    connectionName: name,
    connectTimeout: 3_000,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
  });
  if (isCluster(client)) {
    client.disconnect();
    fail('REDIS_URL names a cluster; this measures one shard, point it at one redis-server');
  }
  let lastError: Error | undefined;
  client.on('error', (error: Error) => {
    lastError = error;
  });
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    const message = (lastError ?? (error as Error)).message;
    fail(`cannot reach Redis at ${REDIS_URL}: ${message}`);
  }
  return client;
}

/** `field:value` lines of an INFO section. */
function infoField(info: string, field: string): string | undefined {
  return info
    .split('\r\n')
    .find((line) => line.startsWith(`${field}:`))
    ?.slice(field.length + 1);
}

interface CpuReading {
  /** Whole process, ns. */
  process: number;
  /** Main thread only, ns. */
  main: number;
  /** Main thread's time runnable but waiting for a CPU, ns. */
  waited: number;
}

/** redis-server's CPU so far, or undefined when pid is not a redis-server on this machine. */
function readProcessCpu(pid: number): CpuReading | undefined {
  try {
    if (!readFileSync(`/proc/${pid}/comm`, 'utf8').startsWith('redis-server')) return undefined;
    // utime and stime are fields 14 and 15, counted after the parenthesised command name; 100 ticks a second.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    return { process: ticks * 10_000_000, ...mainThread(pid) };
  } catch {
    return undefined;
  }
}

/**
 * The thread group leader's time on CPU and time waiting for one, ns: the first two fields of
 * /proc/<pid>/schedstat.
 */
function mainThread(pid: number | 'self'): { main: number; waited: number } {
  const [main, waited] = readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ').map(Number);
  return { main: main!, waited: waited! };
}

function ownCpu(): CpuReading {
  const used = process.cpuUsage();
  return { process: (used.user + used.system) * 1_000, ...mainThread('self') };
}

interface Share {
  /** "61 % of a core (main thread 58 %, waited for a CPU 3 %)", or why it was not measured. */
  text: string;
  /** Main thread's % of a core, when measured. */
  main?: number;
  /** Main thread's % of the time running or waiting to run, when measured. */
  wanted?: number;
}

/** The CPU a process used between two readings over `ms`, as % of one core. */
function share(before: CpuReading | undefined, after: CpuReading | undefined, ms: number): Share {
  if (!before || !after) return { text: 'not measured (not on this machine)' };
  const percent = (ns: number) => Math.round((ns / (ms * 1_000_000)) * 100);
  const main = percent(after.main - before.main);
  const waited = percent(after.waited - before.waited);
  return {
    text: `${percent(after.process - before.process)} % of a core (main thread ${main} %, waited for a CPU ${waited} %)`,
    main,
    wanted: main + waited,
  };
}

/**
 * Which main thread ran at about a full core, if either did; else whether one would have, had the machine
 * not been running other work (running or waiting to run about all the time).
 */
function limit(redis: Share, own: Share): string {
  const named = [
    { name: 'redis-server', ...redis },
    { name: 'this process', ...own },
  ];
  const busy = named.filter(({ main }) => (main ?? 0) >= LIMIT_PERCENT);
  if (busy.length > 0) return `limit: ${busy.map(({ name }) => name).join(' and ')}`;
  const starved = named.filter(({ wanted }) => (wanted ?? 0) >= LIMIT_PERCENT);
  if (starved.length > 0) {
    return `limit: the machine's other work (${starved.map(({ name }) => name).join(' and ')} waited for a CPU)`;
  }
  return `limit: neither main thread reached ${LIMIT_PERCENT} % of a core`;
}

interface Counter {
  received: number;
  /** Resolves `drained` once `received` reaches it. */
  target: number;
  drained: () => void;
}

/** Waits until the subscribers received `target` messages, or `limitMs` passed; true when they all arrived. */
function drain(counter: Counter, target: number, limitMs: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => {
      counter.target = Number.POSITIVE_INFINITY;
      resolve(false);
    }, limitMs);
    counter.drained = () => {
      clearTimeout(timer);
      counter.target = Number.POSITIVE_INFINITY;
      resolve(true);
    };
    counter.target = target;
    if (counter.received >= target) counter.drained();
  });
}

/** Opens `connections` subscriber connections, each SSUBSCRIBEd to every channel, counting into `counter`. */
async function openSubscribers(connections: number, counter: Counter, dropped: { count: number }) {
  return Promise.all(
    Array.from({ length: connections }, async (_, i) => {
      const subscriber = await connect(`bench-shard-sub-${i}`);
      subscriber.on('smessage', () => {
        if (++counter.received >= counter.target) counter.drained();
      });
      // Connections do not reconnect (see connect): one that Redis closes stays closed, its messages missing.
      subscriber.on('end', () => {
        dropped.count++;
      });
      await subscriber.ssubscribe(...channels);
      return subscriber;
    }),
  );
}

/** One SPUBLISH per channel: checks that each reaches `connections` subscribers, and lets every connection warm up. */
async function checkSubscriptions(publisher: Redis, connections: number, counter: Counter): Promise<void> {
  const pipeline = publisher.pipeline();
  for (const channel of channels) pipeline.spublish(channel, 'check');
  const replies = (await pipeline.exec()) ?? [];
  replies.forEach(([error, receivers], i) => {
    if (error) throw error;
    if (Number(receivers) !== connections) {
      throw new Error(`${channels[i]} reached ${receivers} subscribers, expected ${connections}`);
    }
  });
  if (!(await drain(counter, channels.length * connections, DRAIN_LIMIT_MS))) {
    throw new Error('the check messages did not all arrive within 5 s');
  }
}

interface Published {
  spublish: number;
  /** Sum of SPUBLISH replies: messages Redis sent. */
  receivers: number;
}

/** One publisher's loop: pipelines of `PIPELINE` SPUBLISHes over random channels until `deadline` or `max`. */
async function publish(publisher: Redis, deadline: number, max: number, entry: string): Promise<Published> {
  const done: Published = { spublish: 0, receivers: 0 };
  while (performance.now() < deadline && done.spublish < max) {
    const pipeline = publisher.pipeline();
    for (let i = 0; i < PIPELINE; i++) {
      pipeline.spublish(channels[Math.floor(Math.random() * CHANNELS)]!, entry);
    }
    for (const [error, receivers] of (await pipeline.exec()) ?? []) {
      if (error) throw error;
      done.receivers += Number(receivers);
    }
    done.spublish += PIPELINE;
  }
  return done;
}

async function measure(connections: number, publishers: Redis[], redisPid: number, entry: string): Promise<string> {
  const counter: Counter = { received: 0, target: Number.POSITIVE_INFINITY, drained: () => {} };
  const dropped = { count: 0 };
  const subscribers = await openSubscribers(connections, counter, dropped);
  try {
    await checkSubscriptions(publishers[0]!, connections, counter);
    counter.received = 0;
    const redisBefore = readProcessCpu(redisPid);
    const ownBefore = ownCpu();
    const startedAt = performance.now();
    const max = Math.ceil((SECONDS * MAX_SPUBLISH_PER_SECOND) / publishers.length);
    const results = await Promise.all(
      publishers.map((publisher) => publish(publisher, startedAt + SECONDS * 1_000, max, entry)),
    );
    const publishedAt = performance.now();
    const sent = results.reduce((sum, r) => sum + r.receivers, 0);
    const spublish = results.reduce((sum, r) => sum + r.spublish, 0);
    const complete = await drain(counter, sent, DRAIN_LIMIT_MS);
    const endedAt = performance.now();
    const received = counter.received;
    const lost = dropped.count;
    const ms = endedAt - startedAt;
    const redisShare = share(redisBefore, readProcessCpu(redisPid), ms);
    const ownShare = share(ownBefore, ownCpu(), ms);
    const loadAverage = loadavg()[0]!.toFixed(1);
    const shortfall = complete
      ? ''
      : ` (${count(sent - received)} missing after waiting ${DRAIN_LIMIT_MS / 1_000} s; the rates include the wait)`;
    const closed = lost > 0 ? `; ${lost} subscriber connections closed by Redis` : '';
    return (
      `${connections} connections/channel: ${rate((spublish * 1_000) / ms)} SPUBLISH/s, ` +
      `${rate((received * 1_000) / ms)} messages/s out; redis-server ${redisShare.text}, this process ${ownShare.text}; ` +
      `${limit(redisShare, ownShare)}; delivered ${count(received)} of ${count(sent)}${shortfall}, the last ` +
      `${Math.round(endedAt - publishedAt)} ms after the last SPUBLISH reply, ${(ms / 1_000).toFixed(2)} s in all; ` +
      `load average ${loadAverage}${closed}`
    );
  } finally {
    await Promise.all(subscribers.map((subscriber) => subscriber.quit().catch(() => subscriber.disconnect())));
  }
}

function redisServerVersion(info: string): string {
  const served = infoField(info, 'redis_version') ?? '?';
  try {
    const local = execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).trim();
    return `${local} (server reports ${served})`;
  } catch {
    return `redis_version ${served} (no redis-server on PATH here)`;
  }
}

const probe = await connect('bench-shard-probe');
const info = await probe.info('server');
const redisPid = Number(infoField(info, 'process_id'));
const command = [
  process.env.REDIS_URL ? `REDIS_URL=${process.env.REDIS_URL}` : '',
  'node',
  ...process.execArgv,
  relative(process.cwd(), process.argv[1]!),
  ...args,
].filter(Boolean);
out(
  `${new Date().toISOString()}: ${redisServerVersion(info)}, node ${process.version}, ${availableParallelism()} cores; ` +
    `\`${command.join(' ')}\``,
);
out(
  `${CHANNELS} shard channels, ${BYTES}-byte entries, ${PUBLISHERS} publishers pipelining ${PIPELINE} SPUBLISH each, ` +
    `${SECONDS} s per setting, every subscriber and publisher in this one process`,
);
const publishers = await Promise.all(Array.from({ length: PUBLISHERS }, (_, i) => connect(`bench-shard-pub-${i}`)));
const entry = payload(BYTES);
try {
  for (const connections of SETTINGS) out(await measure(connections, publishers, redisPid, entry));
} finally {
  await Promise.all([probe, ...publishers].map((client) => client.quit().catch(() => client.disconnect())));
}
