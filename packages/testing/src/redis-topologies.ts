/**
 * Real Redis deployments for tests, on spare 127.0.0.1 ports: a master with a replica behind a Sentinel,
 * and a 3-master Redis Cluster. Binaries are spawned directly (`redis-server`, `redis-cli`; override with
 * REDIS_SERVER_BINARY / REDIS_CLI_BINARY), every wait is bounded, and `stop()` kills what was started
 * (so does the process's exit, as a safety net). Each setup writes only to its own temporary folder.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts } from './ports.js';

const REDIS_SERVER = process.env.REDIS_SERVER_BINARY ?? 'redis-server';
const REDIS_CLI = process.env.REDIS_CLI_BINARY ?? 'redis-cli';
const HOST = '127.0.0.1';
/** Upper bound for any one step (a process answering, the cluster forming, a failover). */
const STEP_TIMEOUT_MS = 15_000;

export interface RedisSentinelSetup {
  /** `redis+sentinel://:<password>@127.0.0.1:<sentinel>/<master>?sentinelPassword=<sentinel password>` */
  url: string;
  masterName: string;
  /** Password of the data nodes (`requirepass`). */
  password: string;
  /** Password of the sentinel (`requirepass` in its config). */
  sentinelPassword: string;
  sentinelPort: number;
  /** The data nodes: the initial master first, then its replica. */
  dataPorts: [number, number];
  /** The port the sentinel currently names as master. */
  masterPort(): Promise<number>;
  /**
   * SIGKILLs the current master (a crash: no shutdown, connections drop) and resolves with the new
   * master's port once the sentinel has promoted the replica. The old master stays down.
   */
  crashMaster(): Promise<number>;
  stop(): Promise<void>;
}

export interface RedisClusterSetup {
  /** `redis+cluster://:<password>@127.0.0.1:<port>,…` naming every master. */
  url: string;
  password: string;
  ports: number[];
  /**
   * Stops the master on `port` (SIGTERM: it drops every connection), starts it again with the same
   * configuration and cluster state, and resolves once every node reports `cluster_state:ok`.
   * `whileDown` runs once the old process has exited and before the new one starts (bounded by the caller).
   */
  restartNode(port: number, whileDown?: () => Promise<void>): Promise<void>;
  stop(): Promise<void>;
}

/** A master and its replica, monitored by one sentinel (quorum 1), each with a password. */
export async function startRedisSentinel(masterName = 'herald'): Promise<RedisSentinelSetup> {
  const dir = await mkdtemp(join(tmpdir(), 'herald-sentinel-'));
  const processes: ChildProcess[] = [];
  // Characters that must be percent-encoded in a URL, so tests cover the encoding.
  const password = 'data-p@ss/1';
  const sentinelPassword = 'sentinel-p@ss:2';
  const stop = async () => {
    await Promise.all(processes.map(stopProcess));
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const [masterPort, replicaPort, sentinelPort] = (await freePorts(3)) as [number, number, number];
    const dataNodes = new Map<number, ChildProcess>();
    for (const [name, port, extra] of [
      ['master', masterPort, []],
      ['replica', replicaPort, ['--replicaof', HOST, String(masterPort)]],
    ] as const) {
      await mkdir(join(dir, name));
      const child = spawnRedis([
        ...['--port', String(port), '--bind', HOST, '--dir', join(dir, name), '--logfile', join(dir, `${name}.log`)],
        ...['--save', '', '--appendonly', 'no', '--requirepass', password, '--masterauth', password],
        // Sync a replica at once, not after the default 5 s wait for more replicas.
        ...['--repl-diskless-sync-delay', '0'],
        ...extra,
      ]);
      processes.push(child);
      dataNodes.set(port, child);
    }
    await waitUntil('the master', dir, () => probe(masterPort, password, ['PING'], (reply) => reply.includes('+PONG')));
    // The sentinel learns of replicas from the master's INFO, which it repeats only every 10 s: start it
    // once the replica is attached, so its first INFO already names the replica.
    await waitUntil('the replica in sync', dir, () =>
      probe(replicaPort, password, ['INFO', 'replication'], (reply) => reply.includes('master_link_status:up')),
    );

    const config = join(dir, 'sentinel.conf');
    await writeFile(
      config,
      [
        `port ${sentinelPort}`,
        `bind ${HOST}`,
        `dir ${dir}`,
        `logfile ${join(dir, 'sentinel.log')}`,
        `requirepass "${sentinelPassword}"`,
        `sentinel monitor ${masterName} ${HOST} ${masterPort} 1`,
        `sentinel auth-pass ${masterName} "${password}"`,
        `sentinel down-after-milliseconds ${masterName} 1000`,
        `sentinel failover-timeout ${masterName} 10000`,
        '',
      ].join('\n'),
    );
    processes.push(spawnRedis([config, '--sentinel']));

    const masterPortNow = () =>
      sentinelCommand(sentinelPort, sentinelPassword, ['SENTINEL', 'get-master-addr-by-name', masterName]).then(
        (reply) => Number(/\$\d+\r\n(\d+)\r\n$/.exec(reply)?.[1]),
      );
    await waitUntil('the sentinel to know the master and its replica', dir, async () => {
      if ((await masterPortNow().catch(() => 0)) !== masterPort) return false;
      const replicas = await sentinelCommand(sentinelPort, sentinelPassword, ['SENTINEL', 'replicas', masterName]);
      return replicas.includes(String(replicaPort)) && !/disconnected|s_down/.test(replicas);
    });

    return {
      url: `redis+sentinel://:${encodeURIComponent(password)}@${HOST}:${sentinelPort}/${masterName}?sentinelPassword=${encodeURIComponent(sentinelPassword)}`,
      masterName,
      password,
      sentinelPassword,
      sentinelPort,
      dataPorts: [masterPort, replicaPort],
      masterPort: masterPortNow,
      async crashMaster() {
        const before = await masterPortNow();
        const child = dataNodes.get(before);
        if (!child) throw new Error(`no data node on ${before}`);
        const exited = once(child, 'exit');
        child.kill('SIGKILL');
        await exited;
        let after = before;
        await waitUntil('the sentinel to promote the replica', dir, async () => {
          after = await masterPortNow().catch(() => before);
          if (after === before) return false;
          return probe(after, password, ['INFO', 'replication'], (text) => text.includes('role:master'));
        });
        return after;
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * Starts a Sentinel setup and a Redis Cluster at once, for a test of both. If either fails to start, the
 * other is stopped and the failure thrown.
 */
export async function startSentinelAndCluster(): Promise<{ sentinel: RedisSentinelSetup; cluster: RedisClusterSetup }> {
  const [sentinel, cluster] = await Promise.allSettled([startRedisSentinel(), startRedisCluster()]);
  if (sentinel.status === 'rejected' || cluster.status === 'rejected') {
    await Promise.all([sentinel, cluster].map((started) => started.status === 'fulfilled' && started.value.stop()));
    throw sentinel.status === 'rejected' ? sentinel.reason : (cluster as PromiseRejectedResult).reason;
  }
  return { sentinel: sentinel.value, cluster: cluster.value };
}

/** Three masters (no replicas) sharing the 16384 slots, each with a password, formed by `redis-cli --cluster create`. */
export async function startRedisCluster(): Promise<RedisClusterSetup> {
  const dir = await mkdtemp(join(tmpdir(), 'herald-cluster-'));
  const processes: ChildProcess[] = [];
  const password = 'cluster-p@ss/3';
  const stop = async () => {
    await Promise.all(processes.map(stopProcess));
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const ports = await freePorts(6);
    const dataPorts = ports.slice(0, 3);
    const argsOf = new Map<number, string[]>();
    const nodes = new Map<number, ChildProcess>();
    for (const [index, port] of dataPorts.entries()) {
      const nodeDir = join(dir, String(port));
      await mkdir(nodeDir);
      const args = [
        ...['--port', String(port), '--bind', HOST, '--dir', nodeDir, '--logfile', join(dir, `${port}.log`)],
        ...['--save', '', '--appendonly', 'no', '--requirepass', password, '--masterauth', password],
        // An explicit bus port: the default (port + 10000) may be taken, or above 65535.
        ...['--cluster-enabled', 'yes', '--cluster-port', String(ports[3 + index])],
        ...['--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000'],
      ];
      argsOf.set(port, args);
      const child = spawnRedis(args);
      nodes.set(port, child);
      processes.push(child);
    }
    const clusterOk = async () => {
      for (const port of dataPorts) {
        await waitUntil(`cluster_state:ok on ${port}`, dir, () =>
          probe(port, password, ['CLUSTER', 'INFO'], (text) => text.includes('cluster_state:ok')),
        );
      }
    };
    for (const port of dataPorts) {
      await waitUntil(`cluster node ${port}`, dir, () =>
        probe(port, password, ['PING'], (text) => text.includes('+PONG')),
      );
    }
    await runCli(
      [
        ...['-a', password, '--no-auth-warning', '--cluster', 'create'],
        ...dataPorts.map((port) => `${HOST}:${port}`),
        ...['--cluster-replicas', '0', '--cluster-yes'],
      ],
      STEP_TIMEOUT_MS,
    );
    await clusterOk();
    return {
      async restartNode(port, whileDown) {
        const args = argsOf.get(port);
        const old = nodes.get(port);
        if (!args || !old) throw new Error(`no cluster node on port ${port}`);
        await stopProcess(old);
        await whileDown?.();
        const child = spawnRedis(args);
        nodes.set(port, child);
        processes.push(child);
        await waitUntil(`cluster node ${port} after restart`, dir, () =>
          probe(port, password, ['PING'], (text) => text.includes('+PONG')),
        );
        await clusterOk();
      },
      url: `redis+cluster://:${encodeURIComponent(password)}@${dataPorts.map((port) => `${HOST}:${port}`).join(',')}`,
      password,
      ports: dataPorts,
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

// --- processes -------------------------------------------------------------------------------------

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

function spawnRedis(args: string[]): ChildProcess {
  const child = spawn(REDIS_SERVER, args, { stdio: 'ignore' });
  track(child);
  return child;
}

function track(child: ChildProcess): void {
  live.add(child);
  child.once('exit', () => live.delete(child));
  child.once('error', () => live.delete(child));
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    // A test process that ends without afterAll (a crash, a timeout) still leaves no servers behind.
    process.once('exit', () => {
      for (const child of live) child.kill('SIGKILL');
    });
  }
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
  await exited;
  clearTimeout(timer);
}

async function runCli(args: string[], timeoutMs: number): Promise<string> {
  const child = spawn(REDIS_CLI, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  track(child);
  let output = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(timer);
  if (code !== 0) throw new Error(`redis-cli ${args.slice(3).join(' ')} failed (exit ${code}):\n${output}`);
  return output;
}

// --- talking to the servers --------------------------------------------------------------------------

/** Sends AUTH and `command` (RESP) and resolves true once the replies so far satisfy `done`. */
function probe(
  port: number,
  password: string,
  command: string[],
  done: (replies: string) => boolean,
): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: HOST, port });
    let replies = '';
    const finish = (result: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => finish(false), 1_000);
    socket.once('error', () => finish(false));
    socket.once('close', () => finish(done(replies)));
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      replies += chunk;
      if (done(replies)) finish(true);
    });
    socket.write(resp(['AUTH', password]) + resp(command));
  });
}

/** The sentinel's whole reply to `command` (after AUTH's `+OK`), as raw RESP. */
async function sentinelCommand(port: number, password: string, command: string[]): Promise<string> {
  let reply = '';
  const complete = (text: string) => text.startsWith('+OK\r\n') && isCompleteReply(text.slice(5));
  const ok = await probe(port, password, command, (text) => {
    reply = text;
    return complete(text);
  });
  if (!ok) throw new Error(`sentinel on ${port} did not answer ${command.join(' ')}`);
  return reply.slice(5);
}

/** Whether `text` holds one whole RESP reply (enough of the protocol for sentinel answers). */
function isCompleteReply(text: string): boolean {
  let offset = 0;
  const read = (): boolean => {
    const end = text.indexOf('\r\n', offset);
    if (end === -1) return false;
    const type = text[offset];
    const header = text.slice(offset + 1, end);
    offset = end + 2;
    if (type === '$') {
      const length = Number(header);
      if (length < 0) return true;
      if (text.length < offset + length + 2) return false;
      offset += length + 2;
      return true;
    }
    if (type === '*') {
      for (let i = 0; i < Number(header); i++) if (!read()) return false;
      return true;
    }
    return true; // + - :
  };
  return read() && offset === text.length;
}

function resp(args: string[]): string {
  return `*${args.length}\r\n${args.map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`).join('')}`;
}

async function waitUntil(what: string, dir: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + STEP_TIMEOUT_MS;
  while (!(await check())) {
    if (Date.now() > deadline) {
      const logs = await readLogs(dir);
      throw new Error(`timed out after ${STEP_TIMEOUT_MS} ms waiting for ${what}\n${logs}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function readLogs(dir: string): Promise<string> {
  const files = (await readdir(dir).catch(() => [])).filter((file) => file.endsWith('.log'));
  const parts = await Promise.all(
    files.map(
      async (file) => `--- ${file}\n${(await readFile(join(dir, file), 'utf8')).split('\n').slice(-15).join('\n')}`,
    ),
  );
  return parts.join('\n');
}
