/**
 * The webhook scenario's child processes (receiver, POST loop) and the entry points it starts, with
 * a request/answer channel over IPC, and one Redis command without a client library.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { transform } from 'esbuild';
import type { NodeCommand } from '../../../test/support/api-process.js';
import { ROOT, TSX_IMPORT, track } from '../common.js';
import { buildProductionCommand } from '../production-build.js';

export const RECEIVER = fileURLToPath(new URL('../webhook-receiver.ts', import.meta.url));
export const POST_LOOP = fileURLToPath(new URL('../post-loop.ts', import.meta.url));
/** Preloaded into the dispatcher: counts its PostgreSQL round trips. */
export const QUERY_COUNTER = new URL('../pg-query-counter.ts', import.meta.url).href;
/** The dispatcher's entry point; the scenario runs only once it exists. */
export const DISPATCHER_MAIN = 'apps/webhook-dispatcher/src/main.ts';

/** The dispatcher as its container image runs it, and the query counter to preload into it. */
export interface DispatcherBuild extends NodeCommand {
  /** {@link QUERY_COUNTER} compiled to JavaScript beside the build (the image has no TypeScript loader). */
  queryCounter: string;
  /** Where the counter resolves `pg` from (BENCH_PG_FROM): the build's own copy. */
  pgFrom: string;
}

/** Builds the dispatcher's production bundle under `dir` (see `buildProductionCommand`), with its query counter. */
export async function buildDispatcherImage(dir: string): Promise<DispatcherBuild> {
  const command = await buildProductionCommand('webhook-dispatcher', dir);
  const counter = join(command.cwd, 'bench-pg-query-counter.mjs');
  const source = readFileSync(fileURLToPath(QUERY_COUNTER), 'utf8');
  writeFileSync(counter, (await transform(source, { loader: 'ts', format: 'esm' })).code);
  return { ...command, queryCounter: pathToFileURL(counter).href, pgFrom: join(command.cwd, 'dist/main.js') };
}

export interface IpcChild {
  child: ChildProcess;
  ask<T>(message: unknown): Promise<T>;
}

export function forkChild(file: string): IpcChild {
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

/** The verifying receiver (webhook-receiver.ts) in its own process, and its origin once it listens. */
export async function startReceiver(): Promise<{ receiver: IpcChild; origin: string }> {
  const receiver = forkChild(RECEIVER);
  const port = await new Promise<number>((resolve) => {
    let buffered = '';
    receiver.child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const match = /listening (\d+)/.exec(buffered);
      if (match) resolve(Number(match[1]));
    });
  });
  return { receiver, origin: `http://127.0.0.1:${port}` };
}
