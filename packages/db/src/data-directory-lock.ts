import { linkSync, mkdirSync, readFileSync, rmdirSync, statSync, unlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname, uptime } from 'node:os';
import { dirname } from 'node:path';

/**
 * One process per embedded data directory.
 *
 * PGlite keeps the database in the memory of the process that opened it and writes its files back on its
 * own schedule: two processes on one directory each see only their own writes, and whichever stops last
 * overwrites the other's. So whoever opens an embedded directory (the API, `pnpm migrate`, any CLI) first
 * takes this lock, and holds it until it closes the database or exits.
 *
 * The lock is a file beside the directory (`<dir>.lock`), holding who took it: pid, host, when, when the
 * machine booted, and on Linux the process's start time and the boot id. It is written whole to a
 * temporary file and linked into place (link fails if the lock exists): nobody ever reads half a lock.
 * Its holder touches it every {@link HEARTBEAT_MS}. A lock whose holder is gone is taken over by the
 * next opener:
 * - another boot (power loss, reboot): the boot id (or, without /proc, the boot time) differs;
 * - the process died (SIGKILL, a crash): no process has that pid, or one has it but started at another
 *   time (the pid was reused, as pid 1 is in every container);
 * - taken on another host (a container since replaced, a directory on a shared disk), whose processes
 *   can't be checked from here: once it has not been touched for {@link OTHER_HOST_STALE_MS}.
 *
 * Taking over: a taker first creates a guard directory (mkdir is atomic), re-reads the lock and deletes
 * it only if it still holds the dead holder's exact text, then links its own as any opener does. Two
 * processes that both found the same dead holder can't both win, and a live lock written in between is
 * never deleted. A guard left by a taker that died is removed after {@link STALE_GUARD_MS} (a taker
 * holds it for a read and an unlink: microseconds).
 *
 * Why not `proper-lockfile`: it decides staleness by a modification time the holder refreshes on a timer,
 * so a holder whose event loop was paused (a laptop asleep, SIGSTOP) past the stale time loses its lock
 * while alive, and a holder killed a moment ago blocks a restart until the stale time passes.
 */

/** A take-over guard older than this was left by a taker that died; it is removed. */
const STALE_GUARD_MS = 10_000;
/** How often, and how many times (longer than a dead taker's guard lasts), an opener looks again. */
const CONTENDED_RETRY_MS = 50;
const CONTENDED_RETRIES = 300;
/** How often the holder touches its lock (its modification time says it is alive). */
export const HEARTBEAT_MS = 10_000;
/** A lock from another host untouched for this long is a dead holder's. */
export const OTHER_HOST_STALE_MS = 6 * HEARTBEAT_MS;
/** Two boot times further apart than this are two boots (the uptime clock and the wall clock drift). */
const BOOT_TIME_TOLERANCE_MS = 120_000;

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
  /** When the machine booted, ms since the epoch (every platform; approximate). */
  bootedAt?: number;
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
    // Damaged (locks are linked into place whole, so not half written): nobody's, taken over.
    if (holder !== undefined && isAlive(holder, ageMs(path))) throw new DataDirectoryInUseError(directory, holder);
    if (!takeOver(path, text)) sleepMs(CONTENDED_RETRY_MS);
  }
  throw new Error(`could not take the lock ${path}: other processes keep contending for it`);
}

/** Who this process is, as a lock file records it. */
export function currentHolder(): LockHolder {
  const holder: LockHolder = {
    pid: process.pid,
    host: hostname(),
    since: new Date().toISOString(),
    bootedAt: Math.round(Date.now() - uptime() * 1_000),
  };
  const startTicks = processStartTicks(process.pid);
  const bootId = readBootId();
  if (startTicks !== undefined) holder.startTicks = startTicks;
  if (bootId !== undefined) holder.bootId = bootId;
  return holder;
}

/**
 * Whether `holder`, whose lock was last touched `lockAgeMs` ago, may still be running. On another host
 * only the heartbeat tells.
 */
export function isAlive(holder: LockHolder, lockAgeMs: number): boolean {
  if (holder.host !== hostname()) return lockAgeMs < OTHER_HOST_STALE_MS;
  const bootId = readBootId();
  if (holder.bootId !== undefined && bootId !== undefined) {
    if (holder.bootId !== bootId) return false;
  } else if (holder.bootedAt !== undefined) {
    const bootedAt = Date.now() - uptime() * 1_000;
    if (Math.abs(bootedAt - holder.bootedAt) > BOOT_TIME_TOLERANCE_MS) return false;
  }
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
  // The heartbeat: lets an opener on another host tell a live holder from a dead one.
  const heartbeat = setInterval(() => {
    try {
      const now = new Date();
      utimesSync(path, now, now);
    } catch {
      // Deleted by hand, or the disk is gone: the database's own writes will say so.
    }
  }, HEARTBEAT_MS);
  heartbeat.unref();
  const release = () => {
    if (released) return;
    released = true;
    clearInterval(heartbeat);
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

/** Writes `text` to a temporary file and links it to `path`: false if `path` exists. */
function tryCreate(path: string, text: string): boolean {
  const temporary = `${path}.${process.pid}.${Date.now()}.tmp`;
  writeFileSync(temporary, text, { mode: 0o644 });
  try {
    linkSync(temporary, path);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  } finally {
    removeQuietly(() => unlinkSync(temporary));
  }
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
