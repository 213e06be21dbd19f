import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, constants, mkdtempSync, openSync, readFileSync, readSync, rmSync, writeSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

// Each case runs a real process writing its stdout through createLogOutput to a real pipe or file, since
// what is tested is how the OS descriptor behaves (full, closed, blocking) under it.

const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const MODULE = fileURLToPath(new URL('./log-output.ts', import.meta.url));
/** Lines of ~200 bytes the writer writes in one go. */
const LINES = 5_000;

/**
 * A process that writes LINES lines (a 16 KiB buffer), flushes for at most 300 ms and reports on fd 3.
 * `stderr`: where its stderr goes, which it also writes to once (`console.error`), as Node's own warnings
 * do: when that is the same pipe as stdout, Node makes the pipe blocking for both.
 */
function writer(stdout: 'pipe' | number, stderr: 'inherit' | number = 'inherit') {
  const script = `
    const { writeSync } = await import('node:fs');
    const { createLogOutput } = await import(${JSON.stringify(MODULE)});
    const output = createLogOutput(1, { maxBufferedBytes: 16 * 1024 });
    ${stderr === 'inherit' ? '' : "console.error('a warning on stderr');"}
    const pad = 'x'.repeat(190);
    for (let i = 0; i < ${LINES}; i++) output.write(JSON.stringify({ i, pad }) + '\\n');
    await new Promise((resolve) => setTimeout(resolve, 100));
    await output.flush(300);
    writeSync(3, JSON.stringify({ dropped: output.dropped(), closed: output.closed() }));
    process.exit(0);`;
  const child = spawn(process.execPath, ['--import', TSX_LOADER, '--input-type=module', '-e', script], {
    stdio: ['ignore', stdout, stderr, 'pipe'],
  });
  let report = '';
  (child.stdio[3] as NodeJS.ReadableStream).setEncoding('utf8').on('data', (chunk: string) => {
    report += chunk;
  });
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  return {
    child,
    async result(): Promise<{ code: number | null; dropped: number; closed: boolean }> {
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      const code = await exited;
      clearTimeout(timer);
      return {
        code,
        ...(JSON.parse(report || '{"dropped":-1,"closed":false}') as { dropped: number; closed: boolean }),
      };
    },
  };
}

describe('log output', () => {
  it('to a pipe whose reader stopped reading: drops past its buffer, never blocks, and the process exits', async () => {
    const run = writer('pipe');
    run.child.stdout!.pause(); // a reader that never reads
    const result = await run.result();
    expect(result.code).toBe(0);
    expect(result.dropped).toBeGreaterThan(0);
    expect(result.dropped).toBeLessThan(LINES);
    expect(result.closed).toBe(false);
  }, 60_000);

  it('to a pipe whose reader went away: notices, drops everything after, and the process exits', async () => {
    const run = writer('pipe');
    run.child.stdout!.destroy();
    const result = await run.result();
    expect(result.code).toBe(0);
    expect(result.closed).toBe(true);
    expect(result.dropped).toBeGreaterThan(0);
  }, 60_000);

  it('to a named pipe whose reader went away (`pnpm start | tee` ended): notices, and the process exits', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'herald-log-output-'));
    try {
      const fifo = join(dir, 'fifo');
      expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
      const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
      const fd = openSync(fifo, constants.O_WRONLY);
      closeSync(reader); // the reader is gone before the first line
      const result = await writer(fd).result();
      closeSync(fd);
      expect(result).toMatchObject({ code: 0, closed: true });
      expect(result.dropped).toBeGreaterThan(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('to a full named pipe shared with stderr (`2>&1 | …` stalled): never blocks, though Node made it blocking', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'herald-log-output-'));
    try {
      const fifo = join(dir, 'fifo');
      expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
      const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
      const filler = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
      const chunk = Buffer.alloc(4096, 'x');
      // Full, but for room for the one console.error line (which Node writes blocking).
      for (;;) {
        try {
          writeSync(filler, chunk);
        } catch {
          break;
        }
      }
      readSync(reader, Buffer.alloc(4096));
      closeSync(filler);
      const fd = openSync(fifo, constants.O_WRONLY); // blocking, as a shell gives it
      const result = await writer(fd, fd).result();
      closeSync(fd);
      closeSync(reader);
      expect(result).toMatchObject({ code: 0, closed: false });
      expect(result.dropped).toBeGreaterThan(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('to a reader that keeps up: every line, in order', async () => {
    const run = writer('pipe');
    let received = '';
    run.child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      received += chunk;
    });
    const result = await run.result();
    expect(result.code).toBe(0);
    const lines = received.trim().split('\n');
    // The writer outruns any reader within one synchronous loop: whatever passed the buffer is in order.
    expect(lines.length + result.dropped).toBe(LINES);
    const indexes = lines.map((line) => (JSON.parse(line) as { i: number }).i);
    expect(indexes).toEqual([...indexes].sort((a, b) => a - b));
    expect(indexes[0]).toBe(0);
  }, 60_000);

  it('to a file: every line, written synchronously', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'herald-log-output-'));
    try {
      const fd = openSync(join(dir, 'out.log'), 'w');
      const run = writer(fd);
      const result = await run.result();
      closeSync(fd);
      expect(result).toEqual({ code: 0, dropped: 0, closed: false });
      expect(readFileSync(join(dir, 'out.log'), 'utf8').trim().split('\n')).toHaveLength(LINES);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
