import { fstatSync, writeSync } from 'node:fs';
import { Socket } from 'node:net';

/**
 * Where a process's log lines go: stdout (JSON lines) or stderr (the start-up banner), written so that
 * whatever the reader at the other end does, the process is never blocked, never crashed and never kept
 * from exiting by it.
 *
 * - A pipe or socket (a log shipper, `pnpm start | tee`, a test harness) is written through a non-blocking
 *   `net.Socket` on the event loop. A reader that stalls fills the pipe; lines then queue in memory up to
 *   {@link DEFAULT_MAX_BUFFERED_BYTES} and past that are dropped and counted, never waited for. A reader
 *   that went away (EPIPE) turns the output off: every later line is dropped and counted.
 * - A file, a terminal or /dev/null is written synchronously, as `console.log` does: they do not stall.
 *
 * A child process spawned with an inherited stdio pipe is given it in blocking mode, and the mode belongs
 * to the pipe, not the descriptor: Herald spawns none that way (create-database.ts pipes its init worker's
 * stderr). On Linux, Node leaves a pipe non-blocking when `process.stdout`/`process.stderr` use it too (one pipe
 * for both, `2>&1 | tee`, included: log-output.test.ts pins it). On Windows Node makes stdio pipes
 * blocking, so there a stalled reader can still hold the process up; Herald's images run on Linux.
 *   A failing write is dropped and counted, never thrown.
 *
 * Why not pino's own destination (sonic-boom): asynchronously it writes from libuv's thread pool, and a
 * write blocked on a full pipe keeps `process.exit()` from ever returning (the pool's threads are joined
 * at exit); synchronously it blocks the event loop on a full pipe; and its `flushSync`, which pino runs at
 * exit, retries a write that failed with EPIPE forever, which is how a server whose log reader went away
 * ignored SIGTERM. log-output.test.ts pins each case against a real pipe.
 */

/** How often `flush` looks whether the queue has gone out. */
const FLUSH_POLL_MS = 5;
/** Bytes of log lines held in memory while a pipe's reader is slow; past this, lines are dropped. */
export const DEFAULT_MAX_BUFFERED_BYTES = 4 * 1024 * 1024;

export interface LogOutput {
  /** Writes one chunk (a log line with its newline). Never throws, never blocks. */
  write(chunk: string): void;
  /** Lines (chunks) dropped so far: the reader was gone, too slow, or a write failed. */
  dropped(): number;
  /** True once the reader is known to be gone (EPIPE): nothing written from then on is seen. */
  closed(): boolean;
  /**
   * Resolves once everything queued has been handed to the OS, the output closed, or `timeoutMs`
   * passed, whichever is first. Never rejects. Call it before `process.exit` so the last lines are seen
   * when the reader is healthy, without waiting on one that is not.
   */
  flush(timeoutMs: number): Promise<void>;
}

export interface LogOutputOptions {
  /** @default DEFAULT_MAX_BUFFERED_BYTES */
  maxBufferedBytes?: number;
}

/** A {@link LogOutput} on file descriptor `fd` (1: stdout, 2: stderr). */
export function createLogOutput(fd: number, options: LogOutputOptions = {}): LogOutput {
  const maxBufferedBytes = options.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED_BYTES;
  let kind: 'stream' | 'sync' | 'none';
  try {
    const stat = fstatSync(fd);
    kind = stat.isFIFO() || stat.isSocket() ? 'stream' : 'sync';
  } catch {
    kind = 'none'; // fd not open (a daemon started with stdout closed): every line is dropped.
  }
  return kind === 'stream' ? streamOutput(fd, maxBufferedBytes) : syncOutput(fd, kind === 'none');
}

function streamOutput(fd: number, maxBufferedBytes: number): LogOutput {
  let dropped = 0;
  let closed = false;
  let socket: Socket | undefined;
  try {
    // A Pipe handle on the descriptor: libuv makes it non-blocking and writes it from the event loop.
    socket = new Socket({ fd, readable: false, writable: true });
  } catch {
    closed = true;
  }
  if (socket) {
    // Without this, the handle would keep an otherwise finished process alive.
    socket.unref();
    socket.on('error', () => {
      // EPIPE (the reader is gone) or any other write error: nothing written from now on can be read.
      closed = true;
    });
    socket.on('close', () => {
      closed = true;
    });
  }
  return {
    write(chunk) {
      if (closed || !socket || socket.destroyed) {
        dropped++;
        return;
      }
      if (socket.writableLength > maxBufferedBytes) {
        dropped++;
        return;
      }
      socket.write(chunk);
    },
    dropped: () => dropped,
    closed: () => closed,
    async flush(timeoutMs) {
      // 'drain' fires only after a write was refused; polling the queue also ends a short wait at once.
      const deadline = performance.now() + timeoutMs;
      while (socket && !closed && socket.writableLength > 0 && performance.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, FLUSH_POLL_MS));
      }
    },
  };
}

function syncOutput(fd: number, none: boolean): LogOutput {
  let dropped = 0;
  return {
    write(chunk) {
      if (none) {
        dropped++;
        return;
      }
      try {
        writeSync(fd, chunk);
      } catch {
        dropped++;
      }
    },
    dropped: () => dropped,
    closed: () => none,
    flush: () => Promise.resolve(),
  };
}

let stdoutOutput: LogOutput | undefined;
let stderrOutput: LogOutput | undefined;

/** The process's one {@link LogOutput} on stdout, made on first use (log lines). */
export function stdoutLogOutput(): LogOutput {
  stdoutOutput ??= createLogOutput(1);
  return stdoutOutput;
}

/** The process's one {@link LogOutput} on stderr, made on first use (banners, one-line start-up errors). */
export function stderrLogOutput(): LogOutput {
  stderrOutput ??= createLogOutput(2);
  return stderrOutput;
}

/**
 * Writes `lines` to stderr, gives both outputs at most a second to reach their readers, and exits with
 * 1: how a process refuses to start (one line per reason) or ends after a fatal log line.
 */
export async function exitWithLines(lines: readonly string[]): Promise<never> {
  for (const line of lines) stderrLogOutput().write(`${line}\n`);
  await Promise.all([stderrLogOutput().flush(1_000), stdoutLogOutput().flush(1_000)]);
  process.exit(1);
}
