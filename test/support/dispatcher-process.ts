import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { TEST_ENCRYPTION_KEYS } from '@herald/testing';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** `node --import tsx`, not the tsx CLI wrapper: signals reach the real process (see api-process.ts). */
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const DISPATCHER_MAIN = 'apps/webhook-dispatcher/src/main.ts';
/** The line the dispatcher logs once it serves. */
const READY_LINE = 'herald webhook dispatcher ready';
const START_TIMEOUT_MS = 60_000;

export interface DispatcherProcess {
  child: ChildProcess;
  output: () => string;
  /** Sends `signal` and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Runs the webhook-dispatcher app as operators do and waits until it is ready. */
export async function startDispatcherProcess(env: Record<string, string>): Promise<DispatcherProcess> {
  const child = spawn(process.execPath, ['--import', TSX_LOADER, DISPATCHER_MAIN], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '',
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'info',
      // The API processes' keyring (api-process.ts), so secrets they sealed open here.
      HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`dispatcher did not start:\n${output}`)), START_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes(READY_LINE)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`dispatcher exited with ${code} before it was ready:\n${output}`));
    });
  });
  return {
    child,
    output: () => output,
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
