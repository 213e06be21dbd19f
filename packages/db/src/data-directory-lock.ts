import { closeSync, mkdirSync, openSync, readFileSync, rmdirSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname } from 'node:path';

/**
 * One process per embedded data directory.
 *
 * PGlite keeps the database in the memory of the process that opened it and writes its files back on its
 * own schedule: two processes on one directory each see only their own writes, and whichever stops last
 * overwrites the other's. So whoever opens an embedded directory (the API, `pnpm migrate`, any CLI) first
 * takes this lock, and holds it until it closes the database or exits.
 *
 * The lock is a file beside the directory (`<dir>.lock`), created with O_EXCL, holding who took it: pid,
 * host, when, and on Linux the process's start time and the boot id. A lock whose holder is gone is taken
 * over by the next opener:
 * - another boot (power loss, reboot): the boot id differs;
 * - the process died (SIGKILL, a crash): no process has that pid, or one has it but started at another
 *   time (the pid was reused, as pid 1 is in every container).
 * A lock taken on another host (a directory on a shared disk) can't be checked and is never taken over.
 *
 * Taking over is race-free: a taker first creates a guard directory (mkdir is atomic), re-reads the lock
 * and deletes it only if it still holds the dead holder's exact text, then creates its own with O_EXCL as
 * any opener does. Two processes that both found the same dead holder can't both win, and a live lock
 * written in between is never deleted. A guard left by a taker that died is removed after
 * {@link STALE_GUARD_MS}.
 *
 * Why not `proper-lockfile`: it decides staleness by a modification time the holder refreshes on a timer,
 * so a holder whose event loop was paused (a laptop asleep, SIGSTOP) past the stale time loses its lock
 * while alive, and a holder killed a moment ago blocks a restart until the stale time passes.
 */

/** A take-over guard older than this was left by a taker that died; it is removed. */
const STALE_GUARD_MS = 10_000;
/** How often, and how many times, an opener waits for another's take-over or half-written lock. */
const CONTENDED_RETRY_MS = 50;
const CONTENDED_RETRIES = 100;

/** Who holds a lock, as written in the lock file. */
export interface LockHolder {
  pid: number;
  host: string;
  /** ISO time the lock was taken. */
  since: string;
  /** Linux: the process's start time in clock ticks since boot (`/proc/<pid>/stat`, field 22). */
  startTicks?: string;
  /** Linux: `/proc/sys/kernel/random/boot_id` when the lock was taken. */
  bootId?: string;
}

/** The directory is open in another live process (or in this one). */
export class DataDirectoryInUseError extends Error {
  override readonly name = 'DataDirectoryInUseError';
  readonly code = 'DATA_DIRECTORY_IN_USE';
  constructor(
    readonly directory: string,
    readonly holder: LockHolder,
  ) {
    const where = holder.host === hostname() ? '' : ` on host ${holder.host}`;
    const who = holder.pid === process.pid && holder.host === hostname() ? 'this process' : `process ${holder.pid}`;
    super(
      `data directory ${directory} is in use by ${who}${where} (since ${holder.since}); ` +
        'stop that server first, or use another HERALD_DATA_DIR (embedded mode is one process per directory)',
    );
  }
}

export interface DataDirectoryLock {
  /** The lock file. */
  path: string;
  /** Deletes the lock file if it is still this process's. Idempotent; never throws. */
  release(): void;
}

/**
 * Takes the lock of embedded data directory `directory` (which need not exist yet). Throws
 * {@link DataDirectoryInUseError} when a live process holds it; takes over a dead holder's.
 */
export function lockDataDirectory(directory: string): DataDirectoryLock {
  const path = `${directory.replace(/\/+$/, '')}.lock`;
  mkdirSync(dirname(path), { recursive: true });
  const mine = JSON.stringify(currentHolder());
  for (let attempt = 0; attempt < CONTENDED_RETRIES; attempt++) {
    if (tryCreate(path, mine)) return heldLock(path, mine);
    const text = readLock(path);
    if (text === undefined) continue; // deleted meanwhile: try again at once
    const holder = parseHolder(text);
    if (holder === undefined) {
      // Half written (a holder between create and write) or damaged: wait a moment, then treat it as dead.
      if (ageMs(path) < 1_000) {
        sleepMs(CONTENDED_RETRY_MS);
        continue;
      }
    } else if (isAlive(holder)) {
      throw new DataDirectoryInUseError(directory, holder);
    }
    if (!takeOver(path, text)) sleepMs(CONTENDED_RETRY_MS);
  }
  throw new Error(`could not take the lock ${path}: other processes keep contending for it`);
}

/** Who this process is, as a lock file records it. */
export function currentHolder(): LockHolder {
  const holder: LockHolder = { pid: process.pid, host: hostname(), since: new Date().toISOString() };
  const startTicks = processStartTicks(process.pid);
  const bootId = readBootId();
  if (startTicks !== undefined) holder.startTicks = startTicks;
  if (bootId !== undefined) holder.bootId = bootId;
  return holder;
}

/** Whether `holder` may still be running. Unknowable (another host) counts as alive. */
export function isAlive(holder: LockHolder): boolean {
  if (holder.host !== hostname()) return true;
  const bootId = readBootId();
  if (holder.bootId !== undefined && bootId !== undefined && holder.bootId !== bootId) return false;
  try {
    process.kill(holder.pid, 0);
  } catch (error) {
    // EPERM: a process of another user has that pid, so it exists.
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  if (holder.startTicks === undefined) return true;
  const startTicks = processStartTicks(holder.pid);
  return startTicks === undefined || startTicks === holder.startTicks;
}

function heldLock(path: string, mine: string): DataDirectoryLock {
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    process.off('exit', release);
    try {
      if (readLock(path) === mine) unlinkSync(path);
    } catch {
      // Gone already, or unreadable: nothing of ours to delete.
    }
  };
  // A process that exits without closing its database (process.exit on a fatal error) still lets go.
  process.on('exit', release);
  return { path, release };
}

function tryCreate(path: string, text: string): boolean {
  let fd: number;
  try {
    fd = openSync(path, 'wx', 0o644);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
  try {
    writeSync(fd, text);
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * Deletes the lock at `path` if it still reads `deadText`, under the take-over guard. False when another
 * process holds the guard (the caller waits and looks again). Exported for its test only.
 */
export function takeOver(path: string, deadText: string): boolean {
  const guard = `${path}.takeover`;
  try {
    mkdirSync(guard);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    if (ageMs(guard) > STALE_GUARD_MS) removeQuietly(() => rmdirSync(guard));
    return false;
  }
  try {
    if (readLock(path) === deadText) unlinkSync(path);
    return true;
  } finally {
    removeQuietly(() => rmdirSync(guard));
  }
}

function readLock(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

function parseHolder(text: string): LockHolder | undefined {
  try {
    const value = JSON.parse(text) as Partial<LockHolder>;
    if (typeof value.pid !== 'number' || typeof value.host !== 'string' || typeof value.since !== 'string') {
      return undefined;
    }
    return value as LockHolder;
  } catch {
    return undefined;
  }
}

function processStartTicks(pid: number): string | undefined {
  try {
    // The command name (field 2) is in parentheses and may hold spaces: count fields after its end.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

function readBootId(): string | undefined {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return undefined;
  }
}

function ageMs(path: string): number {
  try {
    return Date.now() - statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

function removeQuietly(remove: () => void): void {
  try {
    remove();
  } catch {
    // Someone else removed it first.
  }
}

function sleepMs(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
