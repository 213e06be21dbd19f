import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  currentHolder,
  DataDirectoryInUseError,
  HEARTBEAT_MS,
  type LockHolder,
  lockDataDirectory,
  OTHER_HOST_STALE_MS,
  takeOver,
} from './data-directory-lock.js';

const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const LOCK_MODULE = fileURLToPath(new URL('./data-directory-lock.ts', import.meta.url));

let root: string;
let dataDir: string;
const lockFile = () => `${dataDir}.lock`;
const writeHolder = (holder: LockHolder) => writeFileSync(lockFile(), JSON.stringify(holder));

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'herald-lock-'));
  dataDir = join(root, 'pgdata');
});

afterEach(() => {
  rmSync(root, { recursive: true, force: true });
});

/** A pid no process has now: a child that already exited. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  return Number(child.stdout);
}

describe('the embedded data directory lock', () => {
  it('is refused to a second opener while held, naming the holder, and free again once released', () => {
    const lock = lockDataDirectory(dataDir);
    const holder = JSON.parse(readFileSync(lockFile(), 'utf8')) as LockHolder;
    expect(holder.pid).toBe(process.pid);

    let refused: unknown;
    try {
      lockDataDirectory(dataDir);
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(DataDirectoryInUseError);
    expect((refused as DataDirectoryInUseError).message).toContain(
      `data directory ${dataDir} is in use by this process`,
    );

    lock.release();
    expect(existsSync(lockFile())).toBe(false);
    lockDataDirectory(dataDir).release();
  });

  it('is refused while another live process holds it, naming its pid', async () => {
    const holder = spawn(
      process.execPath,
      [
        '--import',
        TSX_LOADER,
        '-e',
        `const { lockDataDirectory } = await import(${JSON.stringify(LOCK_MODULE)});
         lockDataDirectory(${JSON.stringify(dataDir)}); console.log('held'); setTimeout(() => {}, 60_000);`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      await once(holder.stdout!, 'data');
      expect(() => lockDataDirectory(dataDir)).toThrow(`is in use by process ${holder.pid} (since `);
    } finally {
      holder.kill('SIGKILL');
      await once(holder, 'exit');
    }
    // Killed without releasing: its lock is left behind, and taken over by the next opener.
    expect(JSON.parse(readFileSync(lockFile(), 'utf8')).pid).toBe(holder.pid);
    const lock = lockDataDirectory(dataDir);
    expect(JSON.parse(readFileSync(lockFile(), 'utf8')).pid).toBe(process.pid);
    lock.release();
  });

  it.each<[string, (me: LockHolder) => LockHolder]>([
    ['a process that is gone', (me) => ({ ...me, pid: deadPid() })],
    ['a pid now reused by a process started later', (me) => ({ ...me, startTicks: '1' })],
    ['a previous boot', (me) => ({ ...me, pid: 1, bootId: 'another-boot', startTicks: undefined })],
    [
      'a previous boot, told by the boot time where there is no boot id (macOS)',
      (me) => ({ ...me, pid: 1, bootId: undefined, startTicks: undefined, bootedAt: me.bootedAt! - 3_600_000 }),
    ],
  ])('left by %s is taken over', (_, holderOf) => {
    writeHolder(holderOf(currentHolder()));
    const lock = lockDataDirectory(dataDir);
    expect(JSON.parse(readFileSync(lockFile(), 'utf8'))).toMatchObject({ pid: process.pid });
    lock.release();
  });

  it('taken on another host is refused while its holder keeps touching it, and taken over once it stops', () => {
    // A container since replaced, or a directory on a disk shared with another machine.
    writeHolder({ pid: deadPid(), host: 'another-host', since: '2026-01-01T00:00:00.000Z' });
    expect(() => lockDataDirectory(dataDir)).toThrow(/in use by process \d+ on host another-host/);
    expect(JSON.parse(readFileSync(lockFile(), 'utf8')).host).toBe('another-host');
    const untouched = new Date(Date.now() - OTHER_HOST_STALE_MS - 1_000);
    utimesSync(lockFile(), untouched, untouched);
    const lock = lockDataDirectory(dataDir);
    expect(JSON.parse(readFileSync(lockFile(), 'utf8')).pid).toBe(process.pid);
    lock.release();
  });

  it('is touched by its holder every heartbeat, so another host can tell it is alive', () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      const lock = lockDataDirectory(dataDir);
      const old = new Date(Date.now() - OTHER_HOST_STALE_MS - 1_000);
      utimesSync(lockFile(), old, old);
      vi.advanceTimersByTime(HEARTBEAT_MS);
      expect(Date.now() - statSync(lockFile()).mtimeMs).toBeLessThan(OTHER_HOST_STALE_MS);
      lock.release();
    } finally {
      vi.useRealTimers();
    }
  });

  it('that is damaged is taken over (a lock is linked into place whole, never seen half written)', () => {
    writeFileSync(lockFile(), '{"pid":');
    const lock = lockDataDirectory(dataDir);
    expect(JSON.parse(readFileSync(lockFile(), 'utf8')).pid).toBe(process.pid);
    lock.release();
  });

  it('is never deleted by a late take-over once another opener has replaced the dead holder', () => {
    // A read the dead holder's lock; before A takes it over, B does and writes its own (live) lock.
    const dead = JSON.stringify({ ...currentHolder(), pid: deadPid() });
    writeFileSync(lockFile(), dead);
    const live = JSON.stringify({ ...currentHolder(), since: new Date(Date.now() + 1).toISOString() });
    writeFileSync(lockFile(), live);
    expect(takeOver(lockFile(), dead)).toBe(true);
    expect(readFileSync(lockFile(), 'utf8')).toBe(live);
    // While another taker holds the guard, nobody deletes anything.
    writeFileSync(lockFile(), dead);
    mkdirSync(`${lockFile()}.takeover`);
    expect(takeOver(lockFile(), dead)).toBe(false);
    expect(readFileSync(lockFile(), 'utf8')).toBe(dead);
  });

  it('is won by exactly one of several processes taking over the same dead holder at once', async () => {
    writeHolder({ ...currentHolder(), pid: deadPid() });
    const contenders = Array.from({ length: 6 }, () =>
      spawn(
        process.execPath,
        [
          '--import',
          TSX_LOADER,
          '-e',
          `const { lockDataDirectory } = await import(${JSON.stringify(LOCK_MODULE)});
           try { lockDataDirectory(${JSON.stringify(dataDir)}); console.log('won'); setTimeout(() => {}, 60_000); }
           catch (error) { console.log(error.code === 'DATA_DIRECTORY_IN_USE' ? 'refused' : 'error ' + error.message); }`,
        ],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      ),
    );
    // Each says what it got; the winner keeps holding until every other has answered.
    const outcomes = await Promise.all(
      contenders.map(async (child) => String((await once(child.stdout!, 'data'))[0]).trim()),
    ).finally(() => {
      for (const child of contenders) child.kill('SIGKILL');
    });
    expect(outcomes.filter((outcome) => outcome === 'won')).toHaveLength(1);
    expect(outcomes.filter((outcome) => outcome === 'refused')).toHaveLength(contenders.length - 1);
  }, 60_000);

  it('is let go when the process exits without closing', () => {
    const exited = spawnSync(
      process.execPath,
      [
        '--import',
        TSX_LOADER,
        '-e',
        `const { lockDataDirectory } = await import(${JSON.stringify(LOCK_MODULE)});
         lockDataDirectory(${JSON.stringify(dataDir)}); process.exit(1);`,
      ],
      { encoding: 'utf8' },
    );
    expect(exited.status).toBe(1);
    expect(existsSync(lockFile())).toBe(false);
  });
});
