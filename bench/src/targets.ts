import type { ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { signToken } from '@herald/auth';
import { createDatabase, type HeraldDatabase, insertPost, upsertUser } from '@herald/db';
import { freePort } from '@herald/testing/ports';
import { Pool } from 'undici';
import { onCleanup, ROOT, spawnTracked, stopChild, TSX_IMPORT, UNLIMITED_TENANT_QUOTAS, waitUntil } from './common.js';
import { inspectorUrlFrom } from './inspector.js';
import { BENCH_AUTHOR, BENCH_TAGS, type BenchEvent, benchTitle, PEER_ORG_ID, type Peer } from './protocol.js';
import { createBenchSchema } from './schema.js';

/** Something the load clients subscribe to and the coordinator publishes through. */
export interface Target {
  label: string;
  /** One URL per pod; sockets are split evenly across them. */
  wsUrls: string[];
  /** The server processes whose CPU and RSS are measured (both pods in the two-pod mode). */
  pids: number[];
  /** Their inspector URLs (`--inspect=127.0.0.1:0`), used only to force a GC before reading memory. */
  inspectors: string[];
  token: string;
  orgId: string;
  /** Makes `count` events that can each be published once (Herald: creates drafts over HTTP). */
  prepareEvents(count: number): Promise<BenchEvent[]>;
  /** Publishes one event; resolves when the publish call has answered. */
  publish(event: BenchEvent): Promise<void>;
  /** Subscriptions the server(s) consider active. */
  subscribed(): Promise<number>;
  /** Counters worth reporting from the server side (Herald's /metrics), read at the end. */
  serverCounters(): Promise<Record<string, number>>;
  stop(): Promise<void>;
  /** How this target was set up, for the report. */
  notes: string[];
  /** Server processes that exited while they were being measured, with their last output. */
  deaths: string[];
}

// ---------------------------------------------------------------------------------------------------------
// Raw ws baseline

/** @param fault a deliberate error for the smoke test (see raw-server.ts); never in a measurement. */
export function startRawTarget(
  fault?: 'wrong-id' | 'wrong-title' | 'drop' | 'duplicate',
  cpuProfDir?: string,
): Promise<Target> {
  return startScriptTarget({
    script: 'bench/src/raw-server.ts',
    env: fault ? { RAW_FAULT: fault } : {},
    label: 'raw ws broadcast',
    orgId: 'raw',
    cpuProfDir,
    notes: [
      'ws 8.23 server; payload serialised once per event, per-socket frame = pre-built `{"id":…,"type":"next","payload":` head + payload (Buffer.concat), publish = HTTP POST /publish',
    ],
  });
}

/** What each peer is, for the report. */
const PEER_NOTES: Record<Peer, string> = {
  apollo:
    'Apollo Server 5.5 + graphql-ws 6.4 `useServer({ schema })` on one node:http server (the Apollo docs recipe), makeExecutableSchema, graphql-subscriptions 3 PubSub',
  mercurius: 'Fastify 5.12 + Mercurius 16.10, `subscription: true` (graphql-transport-ws), mqemitter pub/sub, `jit: 1`',
  'mercurius-nojit':
    'Fastify 5.12 + Mercurius 16.10, `subscription: true` (graphql-transport-ws), mqemitter pub/sub, no JIT',
  yoga: 'stock graphql-yoga 5.24 + graphql-ws 6.4 `useServer` through `yoga.getEnveloped` (the Yoga docs recipe), Yoga createPubSub',
};

/** A peer (see peer-server.ts), publish = HTTP POST /publish straight into its in-memory pub/sub. */
export function startPeerTarget(peer: Peer, cpuProfDir?: string): Promise<Target> {
  return startScriptTarget({
    script: 'bench/src/peer-server.ts',
    env: { PEER: peer, NODE_ENV: 'production' },
    label: peer,
    orgId: PEER_ORG_ID,
    cpuProfDir,
    notes: [`${PEER_NOTES[peer]}; publish = HTTP POST /publish into the in-memory pub/sub`],
  });
}

interface ScriptTargetOptions {
  /** Relative to the repository root; prints `listening <port>`, serves POST /publish and GET /stats. */
  script: string;
  env: Record<string, string>;
  label: string;
  orgId: string;
  cpuProfDir: string | undefined;
  notes: string[];
}

/** A one-process server that takes events on `POST /publish` (the raw baseline and the peers). */
async function startScriptTarget(options: ScriptTargetOptions): Promise<Target> {
  const { cpuProfDir } = options;
  const child = spawnTracked(
    process.execPath,
    [
      '--inspect=127.0.0.1:0',
      ...(cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}`] : []),
      '--import',
      TSX_IMPORT,
      options.script,
    ],
    {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', PORT: '0', ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const port = await new Promise<number>((resolve, reject) => {
    let buffered = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const match = /listening (\d+)/.exec(buffered);
      if (match) resolve(Number(match[1]));
    });
    child.once('exit', (code) => reject(new Error(`${options.label} server exited with ${code}: ${stderr}`)));
  });
  const inspector = inspectorUrlFrom(stderr);
  if (!inspector) throw new Error(`${options.label} server: no inspector URL in ${stderr}`);
  const base = `http://127.0.0.1:${port}`;
  const pool = new Pool(base, { connections: 8 });
  let stopping = false;
  const deaths: string[] = [];
  child.once('exit', (code, signal) => {
    if (!stopping)
      deaths.push(`${options.label} server exited by itself (code ${code}, signal ${signal}): ${stderr.slice(-1500)}`);
  });
  return {
    label: options.label,
    wsUrls: [`ws://127.0.0.1:${port}/graphql`],
    pids: [child.pid!],
    inspectors: [inspector],
    deaths,
    token: 'unused',
    orgId: options.orgId,
    async prepareEvents(count) {
      return Array.from({ length: count }, (_, index) => ({
        postId: randomUUID(),
        title: benchTitle(index),
        tags: BENCH_TAGS,
        authorName: BENCH_AUTHOR.name,
      }));
    },
    async publish(event) {
      const response = await pool.request({
        path: '/publish',
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(event),
      });
      await response.body.dump();
      if (response.statusCode !== 204) throw new Error(`${options.label} publish: HTTP ${response.statusCode}`);
    },
    async subscribed() {
      const response = await pool.request({ path: '/stats', method: 'GET' });
      return ((await response.body.json()) as { subscribed: number }).subscribed;
    },
    async serverCounters() {
      return {};
    },
    async stop() {
      stopping = true;
      await pool.close();
      await stopChild(child);
    },
    notes: options.notes,
  };
}

// ---------------------------------------------------------------------------------------------------------
// Herald

export interface HeraldOptions {
  /** 3: the nginx3 scenario (bench/src/nginx3.ts). */
  pods: 1 | 2 | 3;
  /** In memory (one pod only: Herald's embedded mode) or Redis (cluster mode). */
  pubsub: 'memory' | 'redis';
  /** PostgreSQL server; each run gets its own schema. Unused with `database: 'pglite'`. */
  databaseUrl: string | undefined;
  /** Required with `pubsub: 'redis'`. */
  redisUrl?: string | undefined;
  /** `pglite` runs embedded mode on PGlite in a temp dir instead of PostgreSQL (one pod only). */
  database: 'postgres' | 'pglite';
  /** Extra environment for the pods (e.g. WS_SHARED_EXECUTION=false). */
  env?: Record<string, string>;
  /** Write a V8 CPU profile of each pod into this directory (`node --cpu-prof`). */
  cpuProfDir?: string;
  /** Start the pods with `--inspect` (needed to force a GC before reading memory). @default true */
  inspect?: boolean;
  /**
   * The node flags and environment the pods run with: `start-script`, those of `pnpm start` (the embedded
   * mode on a laptop, tuned for a small idle footprint: {@link startScriptRuntime}); `image`, those of the
   * API's container image (deploy/Dockerfile: what serves tenants, {@link imageRuntime}).
   * @default `start-script` for one pod on in-memory pub/sub (embedded mode), otherwise node's defaults
   */
  runtime?: 'start-script' | 'image';
  label: string;
}

const PUBLISH_MUTATION = 'mutation Publish($id: ID!) { publishPost(id: $id) { id status } }';
/** createPost mutations per HTTP request (aliases; the default alias limit is 15), in PGlite mode. */
const DRAFTS_PER_REQUEST = 10;

interface Pod {
  child: ChildProcess;
  port: number;
  inspector: string;
  /** Set when the bench stops it (an exit otherwise is reported). */
  stopping: boolean;
  /** Why it exited, when it exited by itself. */
  death: string | undefined;
  pool: Pool;
  output: string[];
}

/**
 * The environment variables and node flags `pnpm start` (the embedded mode users run) starts the API with,
 * read from the root package.json's `start` script (`… && MALLOC_ARENA_MAX=1 node --max-semi-space-size=8
 * apps/api/dist/main.js`), so the bench's embedded pod runs the same V8 and allocator settings (bench/results/PROFILE.md).
 */
export function startScriptRuntime(): { env: Record<string, string>; nodeFlags: string[] } {
  const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> })
    .scripts;
  const last = scripts.start?.split('&&').at(-1)?.trim().split(/\s+/) ?? [];
  const node = last.indexOf('node');
  if (node < 0 || !last.at(-1)?.endsWith('main.js')) {
    throw new Error(`bench: cannot read the node command of the start script: ${scripts.start}`);
  }
  const env: Record<string, string> = {};
  for (const word of last.slice(0, node)) {
    const [name, value] = word.split('=');
    if (!name || value === undefined)
      throw new Error(`bench: unexpected word before node in the start script: ${word}`);
    env[name] = value;
  }
  return { env, nodeFlags: last.slice(node + 1, -1) };
}

/**
 * The node flags the API's container image starts it with: the `CMD ["node", …, "dist/main.js"]` of
 * deploy/Dockerfile's `api` stage (`FROM … AS api`). Its `--max-semi-space-size=16` is what node picks by
 * itself on a machine with ~8 GiB or more, as raw and stock Yoga get here; in a container node would size
 * the young generation from the memory limit instead (docs/operations.md). Its `--min-semi-space-size=16`
 * gives the young generation that size from the start, where node grows it from 1 MB on demand.
 */
export function imageRuntime(): { env: Record<string, string>; nodeFlags: string[] } {
  return { env: {}, nodeFlags: imageNodeFlags('api') };
}

/**
 * The node flags of deploy/Dockerfile's stage `stage` (`FROM … AS <stage>`): its `CMD ["node", …,
 * "dist/main.js"]` without the first and last words.
 */
export function imageNodeFlags(stage: string): string[] {
  let current = '';
  let command: string[] | undefined;
  for (const line of readFileSync(join(ROOT, 'deploy/Dockerfile'), 'utf8').split('\n')) {
    const from = /^FROM\s+\S+\s+AS\s+(\S+)/i.exec(line);
    if (from) current = from[1]!;
    else if (current === stage && line.startsWith('CMD [')) command = JSON.parse(line.slice('CMD '.length)) as string[];
  }
  if (command?.[0] !== 'node' || command.at(-1) !== 'dist/main.js') {
    throw new Error(
      `bench: cannot read the ${stage} stage's node command from deploy/Dockerfile: ${command?.join(' ')}`,
    );
  }
  return command.slice(1, -1);
}

async function startPod(
  env: Record<string, string>,
  cpuProfDir: string | undefined,
  inspect = true,
  nodeFlags: string[] = [],
): Promise<Pod> {
  const args = [
    ...nodeFlags,
    ...(inspect ? ['--inspect=127.0.0.1:0'] : []),
    ...(cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}`] : []),
    '--import',
    TSX_IMPORT,
    'apps/api/src/main.ts',
  ];
  // Above `info` the "listening" line is not logged: such a pod gets a port chosen here, and is up when
  // /health answers.
  const quietPort = ['info', 'debug', 'trace', undefined].includes(env.LOG_LEVEL) ? undefined : await freePort();
  const child = spawnTracked(process.execPath, args, {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: String(quietPort ?? 0), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  const keep = (line: string) => {
    output.push(line);
    if (output.length > 50) output.shift();
  };
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => keep(chunk));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`Herald did not start in 90 s:\n${output.join('\n')}`)), 90_000);
    let buffered = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) {
        keep(line);
        if (line.includes('"herald api listening"')) {
          const entry = JSON.parse(line) as { port: number };
          clearTimeout(timer);
          resolve(entry.port);
        }
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`Herald exited with ${code} before listening:\n${output.join('\n')}`));
    });
    if (quietPort !== undefined) {
      const poll = setInterval(() => {
        if (child.exitCode !== null) return clearInterval(poll);
        fetch(`http://127.0.0.1:${quietPort}/health`).then(
          (response) => {
            if (!response.ok) return;
            clearInterval(poll);
            clearTimeout(timer);
            resolve(quietPort);
          },
          () => {},
        );
      }, 100);
    }
  });
  const inspector = inspect ? inspectorUrlFrom(output.join('')) : '';
  if (inspector === undefined) throw new Error(`Herald: no inspector URL in its output:\n${output.join('\n')}`);
  const pod: Pod = {
    death: undefined,
    child,
    port,
    inspector,
    stopping: false,
    pool: new Pool(`http://127.0.0.1:${port}`, { connections: 16 }),
    output,
  };
  child.once('exit', (code, signal) => {
    // A pod that dies during a measurement is a result, not noise: say so, with its last words.
    if (!pod.stopping) {
      pod.death = `Herald pod on port ${port} exited by itself (code ${code}, signal ${signal}); its last output: ${output.slice(-6).join(' ').slice(-1500)}`;
      process.stderr.write(`\nbench: ${pod.death}\n`);
    }
  });
  return pod;
}

async function graphql(pool: Pool, token: string, query: string, variables: Record<string, unknown>) {
  const response = await pool.request({
    path: '/graphql',
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = (await response.body.json()) as { data?: any; errors?: unknown[] };
  if (body.errors || !body.data)
    throw new Error(`GraphQL error (HTTP ${response.statusCode}): ${JSON.stringify(body)}`);
  return body.data;
}

async function metricsOf(pool: Pool): Promise<Map<string, number>> {
  const response = await pool.request({ path: '/metrics', method: 'GET' });
  const text = await response.body.text();
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line.length === 0) continue;
    const space = line.lastIndexOf(' ');
    values.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return values;
}

export interface HeraldTarget extends Target {
  /** A GraphQL call through pod 1 as the bench user (a member of `orgId`). */
  graphql(query: string, variables: Record<string, unknown>): Promise<any>;
  /** The environment the pods run with (DATABASE_URL points at this run's schema). */
  env: Record<string, string>;
}

export async function startHeraldTarget(options: HeraldOptions): Promise<HeraldTarget> {
  const jwtSecret = randomBytes(32).toString('hex');
  const orgId = `bench-${randomBytes(4).toString('hex')}`;
  const env: Record<string, string> = {
    NODE_ENV: 'production',
    LOG_LEVEL: 'info',
    JWT_SECRET: jwtSecret,
    // Single and cluster mode seal webhook secrets under it (a fresh key per run).
    HERALD_ENCRYPTION_KEYS: `bench:${randomBytes(32).toString('base64')}`,
    ...UNLIMITED_TENANT_QUOTAS,
    ...options.env,
  };
  const removers: Array<() => Promise<unknown>> = [];
  let dataDir: string | undefined;
  if (options.database === 'pglite') {
    if (options.pods !== 1) throw new Error('PGlite serves one process only');
    dataDir = mkdtempSync(join(tmpdir(), 'herald-bench-'));
    env.HERALD_DATA_DIR = dataDir;
    const dir = dataDir;
    removers.push(async () => rmSync(dir, { recursive: true, force: true }));
  } else {
    if (!options.databaseUrl) throw new Error('PostgreSQL mode needs DATABASE_URL');
    const schema = await createBenchSchema(options.databaseUrl);
    env.DATABASE_URL = schema.url;
    removers.push(() => schema.drop());
  }
  if (options.pubsub === 'redis') {
    if (!options.redisUrl) throw new Error('Redis pub/sub needs REDIS_URL');
    env.REDIS_URL = options.redisUrl;
    // Each target is its own installation on the shared Redis (scenarios run side by side): with one
    // prefix, the socket rebalancer would count another scenario's pods as peers and shed sockets.
    env.HERALD_REDIS_PREFIX ??= `herald-bench-${orgId}:`;
    // The load clients never reconnect, so a socket shed with 1012 would count as missed deliveries;
    // sockets are spread evenly by the bench itself.
    env.WS_REBALANCE ??= 'false';
  } else if (options.pods !== 1) {
    throw new Error('in-memory pub/sub serves one pod only');
  }
  const removeAll = () => Promise.allSettled(removers.map((remove) => remove()));
  const unregister = onCleanup(removeAll);
  // One pod on in-memory pub/sub is the embedded mode `pnpm start` runs: same allocator and V8 settings
  // (the bench still runs the sources through tsx). Cluster pods run as the image does: plain node.
  const runtimeKind =
    options.runtime ?? (options.pods === 1 && options.pubsub === 'memory' ? 'start-script' : undefined);
  const runtime =
    runtimeKind === 'image'
      ? imageRuntime()
      : runtimeKind === 'start-script'
        ? startScriptRuntime()
        : { env: {}, nodeFlags: [] };
  Object.assign(env, { ...runtime.env, ...env });

  let pods: Pod[];
  try {
    pods = await Promise.all(
      Array.from({ length: options.pods }, () => startPod(env, options.cpuProfDir, options.inspect, runtime.nodeFlags)),
    );
  } catch (error) {
    unregister();
    await removeAll();
    throw error;
  }
  const token = await signToken(
    jwtSecret,
    { sub: BENCH_AUTHOR.id, name: BENCH_AUTHOR.name, orgs: [orgId] },
    {
      expiresIn: '6h',
    },
  );
  const publisher = pods[0]!;
  let drafted = 0;
  let directDb: HeraldDatabase | undefined;
  if (env.DATABASE_URL) {
    directDb = await createDatabase({ kind: 'postgres', url: env.DATABASE_URL, poolMax: 8 });
    await upsertUser(directDb.db, BENCH_AUTHOR);
  }

  return {
    label: options.label,
    wsUrls: pods.map((pod) => `ws://127.0.0.1:${pod.port}/graphql`),
    pids: pods.map((pod) => pod.child.pid!),
    inspectors: pods.map((pod) => pod.inspector),
    token,
    orgId,
    env,
    get deaths() {
      return pods.flatMap((pod) => (pod.death ? [pod.death] : []));
    },
    graphql: (query, variables) => graphql(publisher.pool, token, query, variables),
    async prepareEvents(count) {
      const base = drafted;
      drafted += count;
      const events: BenchEvent[] = new Array(count);
      let next = 0;
      // PostgreSQL: drafts go straight in through @herald/db's repository (setup, not measured, and
      // ~10× faster than createPost over HTTP). PGlite belongs to the API process: createPost it is.
      const direct = async (db: HeraldDatabase) => {
        while (next < count) {
          const i = next++;
          const post = await insertPost(db.db, {
            orgId,
            authorId: BENCH_AUTHOR.id,
            title: benchTitle(base + i),
            tags: BENCH_TAGS,
          });
          events[i] = { postId: post.id, title: post.title, tags: post.tags, authorName: BENCH_AUTHOR.name };
        }
      };
      const overHttp = async () => {
        while (next < count) {
          const first = next;
          const indexes = Array.from({ length: Math.min(DRAFTS_PER_REQUEST, count - first) }, (_, i) => first + i);
          next += indexes.length;
          const variables: Record<string, unknown> = { orgId, tags: BENCH_TAGS };
          const fields = indexes.map((index, i) => {
            variables[`t${i}`] = benchTitle(base + index);
            return `p${i}: createPost(input: { orgId: $orgId, title: $t${i}, tags: $tags }) { id title tags }`;
          });
          const declarations = indexes.map((_, i) => `$t${i}: String!`).join(', ');
          const data = await graphql(
            publisher.pool,
            token,
            `mutation Drafts($orgId: ID!, $tags: [String!], ${declarations}) { ${fields.join(' ')} }`,
            variables,
          );
          indexes.forEach((index, i) => {
            const post = data[`p${i}`] as { id: string; title: string; tags: string[] };
            events[index] = { postId: post.id, title: post.title, tags: post.tags, authorName: BENCH_AUTHOR.name };
          });
        }
      };
      await Promise.all(Array.from({ length: 8 }, () => (directDb ? direct(directDb) : overHttp())));
      return events;
    },
    async publish(event) {
      const data = await graphql(publisher.pool, token, PUBLISH_MUTATION, { id: event.postId });
      if (data.publishPost?.id !== event.postId || data.publishPost.status !== 'PUBLISHED') {
        throw new Error(`publishPost answered ${JSON.stringify(data)}`);
      }
    },
    async subscribed() {
      const all = await Promise.all(pods.map((pod) => metricsOf(pod.pool)));
      return all.reduce((sum, values) => sum + (values.get('herald_subscriptions_active') ?? 0), 0);
    },
    async serverCounters() {
      const all = await Promise.all(pods.map((pod) => metricsOf(pod.pool)));
      const counters: Record<string, number> = {};
      for (const values of all) {
        for (const [name, value] of values) {
          if (
            name === 'herald_events_delivered_total' ||
            name === 'herald_ws_slow_consumers_closed_total' ||
            name.startsWith('herald_delivery_errors_total')
          ) {
            counters[name] = (counters[name] ?? 0) + value;
          }
        }
      }
      return counters;
    },
    async stop() {
      await directDb?.close();
      await Promise.all(pods.map((pod) => pod.pool.close()));
      // SIGTERM: Herald's graceful stop (sockets closed with 1012, Redis and the database closed), which is
      // also when --cpu-prof writes the profile.
      for (const pod of pods) pod.stopping = true;
      await Promise.all(pods.map((pod) => stopChild(pod.child, 'SIGTERM', 30_000)));
      unregister();
      await removeAll();
    },
    notes: [
      `${options.pods} API process(es), NODE_ENV=production, LOG_LEVEL=info, ${
        runtime.nodeFlags.length || Object.keys(runtime.env).length
          ? `as ${runtimeKind === 'image' ? 'the API image' : '`pnpm start`'} runs it (${[...Object.entries(runtime.env).map(([k, v]) => `${k}=${v}`), 'node', ...runtime.nodeFlags].join(' ')}), `
          : ''
      }${
        options.database === 'pglite' ? 'PGlite in a temp dir' : 'PostgreSQL (own schema)'
      }, pub/sub ${options.pubsub === 'redis' ? 'Redis' : 'in memory'}${
        options.env && Object.keys(options.env).length
          ? `, ${Object.entries(options.env)
              .map(([k, v]) => `${k}=${v}`)
              .join(' ')}`
          : ''
      }; publish = publishPost over HTTP through pod 1 of drafts made before the run`,
    ],
  };
}

/** Waits until the server reports `expected` active subscriptions. */
export async function waitForSubscriptions(target: Target, expected: number, timeoutMs: number): Promise<void> {
  let last = -1;
  try {
    await waitUntil(
      `${expected} active subscriptions`,
      async () => {
        last = await target.subscribed();
        return last >= expected;
      },
      { timeoutMs, intervalMs: 200 },
    );
  } catch (error) {
    throw new Error(`${(error as Error).message} (the server reports ${last})`);
  }
}
