import { execFile, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePorts } from '@herald/testing/ports';
import pg from 'pg';
import { type ApiProcess, startApiProcess } from '../../test/support/api-process.js';
import { type DispatcherProcess, startDispatcherProcess } from '../../test/support/dispatcher-process.js';
import { type NginxProcess, startNginx } from '../../test/support/nginx.js';
import { type OwnPostgres, ownPostgres } from '../../test/support/postgres-cluster.js';
import { type OwnRedis, ownRedis } from '../../test/support/redis-server.js';
import type { ImageCommands } from './image-build.js';
import { type StallProxy, startStallProxy } from './stall-proxy.js';

/** `MALLOC_ARENA_MAX` of the container images (deploy/Dockerfile; soak.test.ts keeps the two equal). */
export const IMAGE_MALLOC_ARENA_MAX = '2';

const run = promisify(execFile);

/** A process start is tried this many times (each bounded by the start helpers' 60 s). */
const START_TRIES = 3;
/** At the end, how long a process may take to exit on SIGTERM before it is killed. */
const STOP_GRACE_MS = 20_000;

/** The soak's own database on its own PostgreSQL cluster (never the machine's shared server). */
export const SOAK_DATABASE = 'herald_soak';

export interface TopologyOptions {
  pods: number;
  dispatchers: number;
  jwtSecret: string;
  /** Extra environment of the API pods and dispatchers. */
  env: Record<string, string>;
  /** Called when a process exits that the fault schedule did not stop. */
  onUnexpectedExit: (role: string, code: number | null, signal: NodeJS.Signals | null) => void;
  /** Run the apps' production builds as the images do (`--processes image`); the sources under tsx without. */
  commands?: ImageCommands;
}

/** One long-lived process the soak samples: its role (`api-1`, `dispatcher-2`, …) and pid. */
export interface TrackedProcess {
  role: string;
  pid: number;
  /** Its Prometheus `/metrics` (API pods and dispatchers), where its V8 heap is read. */
  metricsUrl?: string;
}

/**
 * The cluster on 127.0.0.1: a PostgreSQL cluster and a redis-server of the soak's own (so they can be
 * stopped, frozen and restarted), API pods on fixed ports behind nginx, and webhook dispatchers.
 */
export interface Topology {
  postgres: OwnPostgres;
  redis: OwnRedis;
  databaseUrl: string;
  redisPort: number;
  /** Pod 1 reaches Redis through this proxy, so its link alone can be stalled. */
  redisProxy: StallProxy;
  postgresPort: number;
  nginx: NginxProcess;
  pods: (ApiProcess | undefined)[];
  podPorts: number[];
  dispatchers: (DispatcherProcess | undefined)[];
  /** Stops pod `index` with `signal` (an expected exit) and resolves with its exit code. */
  stopPod(index: number, signal: NodeJS.Signals): Promise<number | null>;
  startPod(index: number): Promise<void>;
  stopDispatcher(index: number, signal: NodeJS.Signals): Promise<number | null>;
  startDispatcher(index: number): Promise<void>;
  /** Terminates every backend of the soak database; resolves with how many there were. */
  terminateBackends(): Promise<number>;
  /** A client of the soak database, for the ledger and the table sizes. */
  query<Row extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<Row[]>;
  processes(): Promise<TrackedProcess[]>;
  stop(): Promise<void>;
  /** For an exit in a hurry (the soak crashed): SIGKILL every process now, synchronously. */
  killNow(): void;
}

export async function startTopology(options: TopologyOptions): Promise<Topology> {
  const [postgresPort, redisPort] = await freePorts(2);
  const postgres = await ownPostgres(postgresPort!);
  const redis = await ownRedis(redisPort!);
  const podPorts = await freePorts(options.pods);
  const dispatcherPorts = await freePorts(options.dispatchers);
  const pods: (ApiProcess | undefined)[] = podPorts.map(() => undefined);
  const dispatchers: (DispatcherProcess | undefined)[] = dispatcherPorts.map(() => undefined);
  const expectedExit = new Set<object>();
  let nginx: NginxProcess | undefined;
  let stopping = false;
  const nginxPid = () => {
    try {
      return nginx ? Number(readFileSync(join(nginx.dir, 'nginx.pid'), 'utf8').trim()) : undefined;
    } catch {
      return undefined;
    }
  };

  await postgres.start();
  await adminQuery(postgres.url, `create database ${SOAK_DATABASE}`);
  const dbUrl = new URL(postgres.url);
  dbUrl.pathname = `/${SOAK_DATABASE}`;
  const databaseUrl = dbUrl.toString();
  await redis.start();
  const redisProxy = await startStallProxy(redisPort!);

  const env = {
    DATABASE_URL: databaseUrl,
    REDIS_URL: redis.url,
    JWT_SECRET: options.jwtSecret,
    // 3 pods and 2 dispatchers share the cluster's 50 connections with the soak's own.
    DATABASE_POOL_MAX: '6',
    // The allocator setting the container images run with (deploy/Dockerfile).
    MALLOC_ARENA_MAX: IMAGE_MALLOC_ARENA_MAX,
    // And the rest of their environment, when their builds run.
    ...(options.commands ? { NODE_ENV: 'production' } : {}),
    ...options.env,
  };
  /** What a process of each kind is started from (for `pgrep -f`, after a start that timed out). */
  const podScript = options.commands ? 'dist/main.js' : 'apps/api/src/main.ts';
  const dispatcherScript = options.commands ? 'dist/main.js' : 'apps/webhook-dispatcher/src/main.ts';
  const watch = (
    role: string,
    child: { once: (event: 'exit', listener: (code: number | null, signal: NodeJS.Signals | null) => void) => unknown },
    handle: object,
  ) => {
    child.once('exit', (code, signal) => {
      if (!stopping && !expectedExit.has(handle)) options.onUnexpectedExit(role, code, signal);
    });
  };

  /** Our child processes running `script` that no handle tracks: a start that timed out left them behind. */
  const killStrays = async (script: string) => {
    const tracked = new Set([...pods, ...dispatchers].map((handle) => handle?.child.pid));
    for (const pid of await pgrep(['-P', String(process.pid), '-f', script])) if (!tracked.has(pid)) safeKill(pid);
  };
  /** Starts a process, again after a start that timed out (a busy machine), at most {@link START_TRIES} times. */
  const withRetries = async <T>(script: string, start: () => Promise<T>): Promise<T> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await start();
      } catch (error) {
        await killStrays(script);
        if (attempt >= START_TRIES || stopping) throw error;
      }
    }
  };
  const startPod = async (index: number) => {
    const pod = await withRetries(podScript, () =>
      startApiProcess(
        {
          ...env,
          ...(index === 0 ? { REDIS_URL: `redis://127.0.0.1:${redisProxy.port}` } : {}),
          PORT: String(podPorts[index]),
          SHUTDOWN_GRACE_MS: '5000',
        },
        options.commands?.api,
      ),
    );
    pods[index] = pod;
    watch(`api-${index + 1}`, pod.child, pod);
  };
  const startDispatcher = async (index: number) => {
    const dispatcher = await withRetries(dispatcherScript, () =>
      startDispatcherProcess({ ...env, PORT: String(dispatcherPorts[index]) }, options.commands?.dispatcher),
    );
    dispatchers[index] = dispatcher;
    watch(`dispatcher-${index + 1}`, dispatcher.child, dispatcher);
  };
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  pool.on('error', () => {});

  const topology: Topology = {
    postgres,
    redis,
    databaseUrl,
    redisPort: redisPort!,
    redisProxy,
    postgresPort: postgresPort!,
    get nginx() {
      return nginx!;
    },
    pods,
    podPorts,
    dispatchers,
    async stopPod(index, signal) {
      const pod = pods[index];
      if (!pod) return null;
      expectedExit.add(pod);
      pods[index] = undefined;
      return pod.stop(signal);
    },
    startPod,
    async stopDispatcher(index, signal) {
      const dispatcher = dispatchers[index];
      if (!dispatcher) return null;
      expectedExit.add(dispatcher);
      dispatchers[index] = undefined;
      return dispatcher.stop(signal);
    },
    startDispatcher,
    async terminateBackends() {
      const rows = await adminQuery(
        postgres.url,
        'select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()',
        [SOAK_DATABASE],
      );
      return rows.length;
    },
    async query(text, values) {
      const { rows } = await pool.query(text, values as unknown[]);
      return rows;
    },
    async processes() {
      const tracked: TrackedProcess[] = [];
      pods.forEach((pod, index) => {
        if (pod?.child.pid)
          tracked.push({ role: `api-${index + 1}`, pid: pod.child.pid, metricsUrl: `${pod.baseUrl}/metrics` });
      });
      dispatchers.forEach((dispatcher, index) => {
        if (dispatcher?.child.pid)
          tracked.push({
            role: `dispatcher-${index + 1}`,
            pid: dispatcher.child.pid,
            metricsUrl: `http://127.0.0.1:${dispatcherPorts[index]}/metrics`,
          });
      });
      const master = nginxPid();
      if (master) {
        tracked.push({ role: 'nginx', pid: master });
        for (const worker of await children(master)) tracked.push({ role: 'nginx-worker', pid: worker });
      }
      const [redisPid] = await pgrep(['-f', `^redis-server 127.0.0.1:${redisPort}`]);
      if (redisPid) tracked.push({ role: 'redis', pid: redisPid });
      const postmaster = await pgrep(['-f', `postgres.* -p ${postgresPort} `]);
      if (postmaster[0]) {
        tracked.push({ role: 'postgres', pid: postmaster[0] });
        for (const child of await children(postmaster[0])) tracked.push({ role: 'postgres-child', pid: child });
      }
      tracked.push({ role: 'soak', pid: process.pid });
      return tracked;
    },
    killNow() {
      stopping = true;
      for (const handle of [...pods, ...dispatchers]) handle?.child.kill('SIGKILL');
      const found = (pattern: string) => {
        try {
          return execFileSync('pgrep', ['-f', pattern], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number);
        } catch {
          return [];
        }
      };
      const postmasters = found(`postgres.* -p ${postgresPort} `);
      for (const pid of [nginxPid(), ...found(`^redis-server 127.0.0.1:${redisPort}`), ...postmasters])
        if (pid) safeKill(pid);
    },
    async stop() {
      stopping = true;
      await postgres.thaw().catch(() => {});
      // Bounded: a hung process may never act on SIGTERM (its event loop is what handles signals).
      const stopOrKill = async (handle: ApiProcess | DispatcherProcess | undefined) => {
        if (!handle) return;
        const timer = setTimeout(() => handle.child.kill('SIGKILL'), STOP_GRACE_MS);
        await handle.stop('SIGTERM');
        clearTimeout(timer);
      };
      await Promise.allSettled([...dispatchers, ...pods].map(stopOrKill));
      await nginx?.stop().catch(() => {});
      await redisProxy.close().catch(() => {});
      await pool.end().catch(() => {});
      await redis.cleanup().catch(() => {});
      await postgres.cleanup().catch(() => {});
    },
  };

  try {
    // The first pod migrates alone; the others and the dispatchers start on the migrated schema.
    await startPod(0);
    await Promise.all(podPorts.slice(1).map((_, index) => startPod(index + 1)));
    nginx = await startNginx(podPorts);
    await Promise.all(dispatcherPorts.map((_, index) => startDispatcher(index)));
  } catch (error) {
    await topology.stop();
    throw error;
  }
  return topology;
}

async function adminQuery(url: string, text: string, values: unknown[] = []): Promise<unknown[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text, values)).rows;
  } finally {
    await client.end();
  }
}

async function pgrep(args: string[]): Promise<number[]> {
  const { stdout } = await run('pgrep', args).catch(() => ({ stdout: '' }));
  return stdout.split('\n').filter(Boolean).map(Number);
}

const children = (pid: number) => pgrep(['-P', String(pid)]);

function safeKill(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}
