import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { TEST_ENCRYPTION_KEYS } from '@herald/testing';
import type { DispatcherHarness } from '@herald/webhook-engine/testing';

/*
 * The dispatcher app as operators run it (`src/main.ts` under tsx), in a child process of a test, on a
 * dispatcher harness's schema and Redis prefix: for the tests that SIGKILL it.
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
  /** Resolves when the process has exited, however. */
  exited: Promise<unknown>;
}

export interface DispatcherProcessOptions {
  /** `HERALD_TEST_CRASH_AT`: the step at which the process SIGKILLs itself. */
  crashAt?: string;
  /** Variables added to (or replacing) the defaults below. */
  env?: Record<string, string>;
  /** @default 30_000 */
  readyTimeoutMs?: number;
}

/** Every process started here, so a test's `afterAll` can kill what is left ({@link killDispatcherProcesses}). */
const started: ChildProcess[] = [];

export function spawnDispatcherProcess(
  harness: DispatcherHarness,
  options: DispatcherProcessOptions = {},
): DispatcherProcess {
  const child = spawn(process.execPath, ['--import', TSX_LOADER, MAIN], {
    env: {
      PATH: process.env.PATH,
      NODE_ENV: 'test',
      LOG_LEVEL: 'info',
      PORT: '0',
      HOST: '127.0.0.1',
      DATABASE_URL: harness.schema.url,
      REDIS_URL: harness.redisUrl,
      HERALD_REDIS_PREFIX: harness.redisPrefix,
      HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
      WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
      WEBHOOK_TIMEOUT_MS: '1000',
      WEBHOOK_RETRY_BASE_MS: '50',
      WEBHOOK_POLL_INTERVAL_MS: '50',
      ...(options.crashAt ? { HERALD_TEST_CRASH_AT: options.crashAt } : {}),
      ...options.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.push(child);
  let output = '';
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`dispatcher did not start:\n${output}`)),
      options.readyTimeoutMs ?? 30_000,
    );
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes(READY_LINE)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`dispatcher exited with ${code} before it was ready:\n${output}`));
    });
  });
  // A crash planned after start-up rejects `ready` after it resolved: nothing listens then.
  ready.catch(() => {});
  return { child, ready, exited };
}

/** Starts a dispatcher process and resolves with it once it is ready. */
export async function startDispatcherProcess(
  harness: DispatcherHarness,
  options: DispatcherProcessOptions = {},
): Promise<ChildProcess> {
  const started = spawnDispatcherProcess(harness, options);
  await started.ready;
  return started.child;
}

/** SIGKILLs every dispatcher process started here that is still running. */
export function killDispatcherProcesses(): void {
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}
