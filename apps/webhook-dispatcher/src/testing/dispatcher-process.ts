import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { TEST_ENCRYPTION_KEYS } from '@herald/testing';
import type { DispatcherHarness } from '@herald/webhook-engine/testing';

/*
 * The dispatcher app as operators run it (`src/main.ts` under tsx), in a child process of a test: the
 * one way every test starts it (the app's own crash tests, and test/support/dispatcher-process.ts for the
 * cross-app ones).
 */

const MAIN = fileURLToPath(new URL('../main.ts', import.meta.url));
// tsx's loader in this very process (`node --import tsx`), not the tsx CLI: the CLI is a wrapper process
// that would take the signal (a SIGKILL would leave the real process running on as an orphan).
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const READY_LINE = 'herald webhook dispatcher ready';

export interface DispatcherProcess {
  child: ChildProcess;
  /** Resolves once the process logs that it is ready; rejects if it exits first or takes too long. */
  ready: Promise<void>;
  /** Resolves with the exit code when the process has exited, however. */
  exited: Promise<number | null>;
  /** What it wrote to stdout and stderr so far. */
  output(): string;
}

/** Every process started here, so a test's `afterAll` can kill what is left ({@link killDispatcherProcesses}). */
const started: ChildProcess[] = [];

/**
 * Starts the app with `env` over a few defaults (a free port on 127.0.0.1, info logs, the tests'
 * encryption keyring). `ready` rejects after `readyTimeoutMs` (default 30 s) without the ready line.
 * `command`: node's arguments and directory for something else than the sources (the production build).
 */
export function spawnDispatcherApp(
  env: Record<string, string>,
  readyTimeoutMs = 30_000,
  command?: { args: string[]; cwd: string },
): DispatcherProcess {
  const child = spawn(process.execPath, command?.args ?? ['--import', TSX_LOADER, MAIN], {
    ...(command ? { cwd: command.cwd } : {}),
    env: {
      PATH: process.env.PATH ?? '',
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'info',
      HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.push(child);
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`dispatcher did not start:\n${output}`)), readyTimeoutMs);
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
  // A crash planned after start-up rejects `ready` after it resolved: nothing listens then.
  ready.catch(() => {});
  return { child, ready, exited, output: () => output };
}

export interface DispatcherProcessOptions {
  /** `HERALD_TEST_CRASH_AT`: the step at which the process SIGKILLs itself. */
  crashAt?: string;
  /** Variables added to (or replacing) the harness's. */
  env?: Record<string, string>;
  readyTimeoutMs?: number;
}

/** The app on a dispatcher harness's schema and Redis prefix, with short timeouts and retries. */
export function spawnDispatcherProcess(
  harness: DispatcherHarness,
  options: DispatcherProcessOptions = {},
): DispatcherProcess {
  return spawnDispatcherApp(
    {
      NODE_ENV: 'test',
      DATABASE_URL: harness.schema.url,
      REDIS_URL: harness.redisUrl,
      HERALD_REDIS_PREFIX: harness.redisPrefix,
      WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
      WEBHOOK_TIMEOUT_MS: '1000',
      WEBHOOK_RETRY_BASE_MS: '50',
      WEBHOOK_POLL_INTERVAL_MS: '50',
      ...(options.crashAt ? { HERALD_TEST_CRASH_AT: options.crashAt } : {}),
      ...options.env,
    },
    options.readyTimeoutMs,
  );
}

/** Starts the app on a harness and resolves with it once it is ready. */
export async function startDispatcherProcess(
  harness: DispatcherHarness,
  options: DispatcherProcessOptions = {},
): Promise<ChildProcess> {
  const process = spawnDispatcherProcess(harness, options);
  await process.ready;
  return process.child;
}

/** SIGKILLs every dispatcher process started here that is still running. */
export function killDispatcherProcesses(): void {
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}
