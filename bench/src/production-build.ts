/**
 * An app as its container image runs it: its production build (`pnpm build:prod <app> <dir>`: one
 * esbuild bundle and a pruned node_modules, what the image copies to /app), started from that folder
 * with the node flags of its deploy/Dockerfile stage's `CMD`. The soak's `--processes image` and the
 * webhook scenario's dispatchers run these.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { NodeCommand } from '../../test/support/api-process.js';
import { ROOT } from './common.js';
import { imageNodeFlags } from './targets.js';

const run = promisify(execFile);

/** Builds `app` under `dir/<app>` and returns how its image starts it: `node <flags> dist/main.js` there. */
export async function buildProductionCommand(app: 'api' | 'webhook-dispatcher', dir: string): Promise<NodeCommand> {
  const out = join(dir, app);
  await run('pnpm', ['build:prod', app, out], { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 });
  return { cwd: out, args: [...imageNodeFlags(app), 'dist/main.js'] };
}
