import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { TEST_ENCRYPTION_KEYS } from '@herald/testing';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/**
 * The API runs as `node --import tsx …`: tsx's loader inside the one process. The tsx CLI would be a
 * wrapper process that relays signals and SIGKILLs its child 30 ms later, so a graceful shutdown could
 * be cut short (and a SIGKILL would orphan the real process).
 */
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const API_MAIN = 'apps/api/src/main.ts';
/**
 * Start-up includes migrations and TypeScript transpilation on a busy 2-core machine; in embedded mode
 * from source (no template beside it) also initdb and every migration in PGlite.
 */
const START_TIMEOUT_MS = 120_000;

export interface ApiProcess {
  child: ChildProcess;
  port: number;
  baseUrl: string;
  stdout: string[];
  stderr: () => string;
  /** Resolves once stderr matches `pattern` (bounded by the start timeout). */
  waitForStderr(pattern: RegExp): Promise<RegExpExecArray>;
  /** Sends `signal` and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** How to start a process other than from its TypeScript sources: node's arguments, and its directory. */
export interface NodeCommand {
  args: string[];
  cwd: string;
}

/**
 * Runs `apps/api/src/main.ts` as its own process, as `pnpm start` does, and waits until it listens.
 * `command`: run something else instead (the production build, as the container image does: bench/soak).
 */
export async function startApiProcess(env: Record<string, string>, command?: NodeCommand): Promise<ApiProcess> {
  const child = spawn(process.execPath, command?.args ?? ['--import', TSX_LOADER, API_MAIN], {
    cwd: command?.cwd ?? ROOT,
    // No drain pause by default: tests that stop pods don't wait for a load balancer that isn't there.
    env: {
      PATH: process.env.PATH ?? '',
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'info',
      SHUTDOWN_DRAIN_DELAY_MS: '0',
      // Single and cluster mode need the keyring; the dispatchers tests start get the same one.
      HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stdout: string[] = [];
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      // Not left running: it would hold its port, and in embedded mode its data directory.
      child.kill('SIGKILL');
      reject(new Error(`API did not start in time; stderr:\n${stderr}`));
    }, START_TIMEOUT_MS);
    let buffered = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) {
        stdout.push(line);
        const entry = safeJson(line);
        if (entry?.msg === 'herald api listening' && typeof entry.port === 'number') {
          clearTimeout(timer);
          resolve(entry.port);
        }
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`API exited with ${code} before listening; stderr:\n${stderr}`));
    });
  });
  return {
    child,
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    stdout,
    stderr: () => stderr,
    async waitForStderr(pattern) {
      const deadline = Date.now() + START_TIMEOUT_MS;
      for (;;) {
        const match = pattern.exec(stderr);
        if (match) return match;
        if (Date.now() > deadline || child.exitCode !== null)
          throw new Error(`stderr never matched ${pattern}:\n${stderr}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** Runs the API expecting it to refuse to start; resolves with its exit code and output (logs are on stdout). */
export async function runApiExpectingExit(
  env: Record<string, string>,
): Promise<{ code: number | null; stderr: string; stdout: string }> {
  const child = spawn(process.execPath, ['--import', TSX_LOADER, API_MAIN], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  let stdout = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), START_TIMEOUT_MS);
  const [code] = await once(child, 'exit');
  clearTimeout(timer);
  return { code: code as number | null, stderr, stdout };
}

function safeJson(line: string): Record<string, unknown> | undefined {
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}
