import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { spawnDispatcherApp } from '../../apps/webhook-dispatcher/src/testing/dispatcher-process.js';
import type { NodeCommand } from './api-process.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** `node --import tsx`, not the tsx CLI wrapper: signals reach the real process (see api-process.ts). */
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const DISPATCHER_MAIN = 'apps/webhook-dispatcher/src/main.ts';
const START_TIMEOUT_MS = 60_000;

export interface DispatcherProcess {
  child: ChildProcess;
  output: () => string;
  /** Sends `signal` and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/**
 * Runs the webhook-dispatcher app as operators do and waits until it is ready. `command`: node's arguments
 * and directory for something else than the sources (the production build, as the image runs it).
 */
export async function startDispatcherProcess(
  env: Record<string, string>,
  command?: NodeCommand,
): Promise<DispatcherProcess> {
  const { child, ready, exited, output } = spawnDispatcherApp(env, START_TIMEOUT_MS, command);
  await ready;
  return {
    child,
    output,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** Runs the dispatcher expecting it to refuse to start; resolves with its exit code and output. */
export async function runDispatcherExpectingExit(
  env: Record<string, string>,
): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, ['--import', TSX_LOADER, DISPATCHER_MAIN], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), START_TIMEOUT_MS);
  const [code] = await once(child, 'exit');
  clearTimeout(timer);
  return { code: code as number | null, output };
}
