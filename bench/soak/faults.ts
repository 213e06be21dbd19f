import type { Receiver } from './receivers.js';
import type { Topology } from './topology.js';

export const FAULTS = [
  'kill-pod',
  'kill-dispatcher',
  'rolling-restart',
  'redis-restart',
  'redis-stall',
  'pg-terminate',
  'pg-stop',
  'pg-freeze',
  'receiver-away',
] as const;
/**
 * Not in `all`: Redis restarted empty and, at once, pod 1's link to it stalled for 10 s: the two faults
 * back to back, as a long run's schedule can place them.
 */
export const EXTRA_FAULTS = ['redis-restart-stall'] as const;
export type FaultName = (typeof FAULTS)[number] | (typeof EXTRA_FAULTS)[number];
/** The CI run's few faults: a crash of each kind of process, the data stores' cheapest outages. */
export const SHORT_FAULTS: FaultName[] = ['kill-pod', 'kill-dispatcher', 'redis-restart', 'pg-terminate'];

/** A fault that ran: when it started and ended (ms since the run started). */
export interface FaultRecord {
  name: FaultName;
  startAt: number;
  endAt: number;
  detail: string;
  /** Filled in after the run from the probes: when every path worked again. */
  recoveredAt?: number;
  recoveryMs?: number | null;
}

export interface FaultContext {
  topology: Topology;
  awayReceiver: Receiver;
  /** How long the receiver stays away. */
  awayMs: number;
  log: (line: string) => void;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
/** Between a crash and the restart: long enough for clients and leases to notice. */
const RESTART_PAUSE_MS = 5_000;
const PG_STOP_MS = 10_000;
const PG_FREEZE_MS = 5_000;
const REDIS_STALL_MS = 10_000;

/** Runs one fault to its end (the process restarted, the server back); resolves with what it did. */
export async function runFault(name: FaultName, context: FaultContext): Promise<string> {
  const { topology } = context;
  switch (name) {
    case 'kill-pod': {
      const index = 1 % topology.pods.length;
      const pid = topology.pods[index]?.child.pid;
      await topology.stopPod(index, 'SIGKILL');
      await sleep(RESTART_PAUSE_MS);
      await topology.startPod(index);
      return `SIGKILL api-${index + 1} (pid ${pid}), restarted after ${RESTART_PAUSE_MS} ms`;
    }
    case 'kill-dispatcher': {
      const pid = topology.dispatchers[0]?.child.pid;
      await topology.stopDispatcher(0, 'SIGKILL');
      await sleep(RESTART_PAUSE_MS);
      await topology.startDispatcher(0);
      return `SIGKILL dispatcher-1 (pid ${pid}), restarted after ${RESTART_PAUSE_MS} ms`;
    }
    case 'rolling-restart': {
      const codes: string[] = [];
      for (let index = 0; index < topology.pods.length; index++) {
        codes.push(String(await topology.stopPod(index, 'SIGTERM')));
        await topology.startPod(index);
      }
      return `SIGTERM and restart of every pod in turn (exit codes ${codes.join(', ')})`;
    }
    case 'redis-restart':
      await topology.redis.kill();
      await topology.redis.start();
      return 'redis-server SIGKILLed and started empty';
    case 'redis-restart-stall':
      await topology.redis.kill();
      await topology.redis.start();
      topology.redisProxy.stall();
      await sleep(REDIS_STALL_MS);
      topology.redisProxy.resume();
      return `redis-server SIGKILLed and started empty, then api-1's link to it held for ${REDIS_STALL_MS} ms`;
    case 'redis-stall':
      topology.redisProxy.stall();
      await sleep(REDIS_STALL_MS);
      topology.redisProxy.resume();
      return `api-1's link to Redis held (connections open, no bytes through) for ${REDIS_STALL_MS} ms`;
    case 'pg-terminate':
      return `pg_terminate_backend of ${await topology.terminateBackends()} backends`;
    case 'pg-stop':
      await topology.postgres.stop();
      await sleep(PG_STOP_MS);
      await topology.postgres.start();
      return `PostgreSQL stopped (fast) for ${PG_STOP_MS} ms and started`;
    case 'pg-freeze':
      await topology.postgres.freeze();
      await sleep(PG_FREEZE_MS);
      await topology.postgres.thaw();
      return `PostgreSQL SIGSTOPped for ${PG_FREEZE_MS} ms and continued`;
    case 'receiver-away':
      await context.awayReceiver.goAway();
      await sleep(context.awayMs);
      await context.awayReceiver.comeBack();
      return `receiver ${context.awayReceiver.name} closed for ${context.awayMs} ms`;
  }
}

/** Parses `--faults`: `all`, `none`, `short` or a comma list of {@link FAULTS} and {@link EXTRA_FAULTS}. */
export function parseFaults(value: string): FaultName[] {
  if (value === 'all') return [...FAULTS];
  if (value === 'none') return [];
  if (value === 'short') return [...SHORT_FAULTS];
  const names = value.split(',').map((name) => name.trim());
  for (const name of names)
    if (![...FAULTS, ...EXTRA_FAULTS].includes(name as FaultName))
      throw new Error(`unknown fault ${name}; known: ${[...FAULTS, ...EXTRA_FAULTS].join(', ')}`);
  return names as FaultName[];
}

/**
 * When each fault starts (ms since the run started): spread evenly between the warm-up and 80 % of the
 * run, so the last fifth is calm and every fault has time to heal before the drain.
 */
export function faultTimes(count: number, runMs: number, warmUpMs: number): number[] {
  const span = runMs * 0.8 - warmUpMs;
  return Array.from({ length: count }, (_, index) => Math.round(warmUpMs + (span * index) / Math.max(1, count)));
}
