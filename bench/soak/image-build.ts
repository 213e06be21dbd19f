import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { NodeCommand } from '../../test/support/api-process.js';
import { ROOT } from '../src/common.js';
import { imageNodeFlags } from '../src/targets.js';

const run = promisify(execFile);

/** The apps the soak runs, by their deploy/Dockerfile stage (and `pnpm build:prod` app) name. */
export interface ImageCommands {
  api: NodeCommand;
  dispatcher: NodeCommand;
}

/**
 * `pnpm soak --processes image`: the pods and dispatchers run as the container images run them. Each app's
 * production build (`pnpm build:prod <app> <dir>`: one esbuild bundle and a pruned node_modules, what the
 * image copies to /app) is made under `dir`, and started with the node flags of its Dockerfile stage's
 * `CMD`, from its own directory. Without it the soak runs the TypeScript sources under tsx, whose loader
 * and per-module transforms and source maps add their own memory (docs/operations.md).
 */
export async function buildImageCommands(dir: string): Promise<ImageCommands> {
  const command = async (app: 'api' | 'webhook-dispatcher'): Promise<NodeCommand> => {
    const out = join(dir, app);
    await run('pnpm', ['build:prod', app, out], { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 });
    return { cwd: out, args: [...imageNodeFlags(app), 'dist/main.js'] };
  };
  // One after another: both run `pnpm deploy` on the one workspace.
  const api = await command('api');
  const dispatcher = await command('webhook-dispatcher');
  return { api, dispatcher };
}
