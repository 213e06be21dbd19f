import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { prepareNginx, startNginx } from './nginx.js';

// The nginx helper of the load-balancer tests and `pnpm soak`: on a machine without nginx it says what is
// missing (not "spawn nginx ENOENT") and leaves no temp directory behind.

let scratch: string;
const saved = { binary: process.env.NGINX_BINARY, tmpdir: process.env.TMPDIR };

beforeEach(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'nginx-helper-test-'));
  // os.tmpdir() reads TMPDIR at each call: the helper's temp directory lands here, where nothing else writes.
  process.env.TMPDIR = scratch;
  process.env.NGINX_BINARY = join(scratch, 'no-such-nginx');
});

afterEach(async () => {
  for (const [name, value] of [
    ['NGINX_BINARY', saved.binary],
    ['TMPDIR', saved.tmpdir],
  ] as const) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
  await rm(scratch, { recursive: true, force: true });
});

describe('nginx helper without nginx', () => {
  it('prepareNginx names the missing binary and how to get it, keeping the ENOENT as the cause', async () => {
    const failure = await prepareNginx([1]).then(
      () => undefined,
      (error: unknown) => error as Error & { cause?: NodeJS.ErrnoException },
    );
    expect(failure?.message).toContain(`nginx is not installed: no \`${join(scratch, 'no-such-nginx')}\` to run`);
    expect(failure?.message).toContain('NGINX_BINARY');
    expect(failure?.cause?.code).toBe('ENOENT');
    expect(await readdir(scratch)).toEqual([]);
  });

  it('startNginx fails the same way before starting anything', async () => {
    await expect(startNginx([1])).rejects.toThrow(/nginx is not installed/);
    expect(await readdir(scratch)).toEqual([]);
  });
});
