import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, inject, it } from 'vitest';

// In its own process, bounded from here: without the fix the scenario's event loop never runs again.
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const SCENARIO = fileURLToPath(new URL('../testing/history-fill-scenario.ts', import.meta.url));

describe('the Redis history filling a gap while its command connection is down', () => {
  it('retries the fill later instead of spinning, and delivers what was missed once Redis is back', async () => {
    const child = spawn(process.execPath, ['--import', TSX_LOADER, SCENARIO], {
      env: { ...process.env, REDIS_URL: inject('redisUrl') },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    const [code] = await once(child, 'exit');
    clearTimeout(timer);
    expect(out).toContain('loop alive');
    expect(out).toContain('delivered [1,2,3,4,5]');
    expect(code).toBe(0);
  }, 90_000);
});
