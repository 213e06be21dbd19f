import type { NodeCommand } from '../../test/support/api-process.js';
import { buildProductionCommand } from '../src/production-build.js';

/** The apps the soak runs, by their deploy/Dockerfile stage (and `pnpm build:prod` app) name. */
export interface ImageCommands {
  api: NodeCommand;
  dispatcher: NodeCommand;
}

/**
 * `pnpm soak --processes image`: the pods and dispatchers run as the container images run them, each from
 * its production build under `dir` (see `buildProductionCommand`). Without it the soak runs the TypeScript
 * sources under tsx, whose loader and per-module transforms and source maps add their own memory
 * (docs/operations.md).
 */
export async function buildImageCommands(dir: string): Promise<ImageCommands> {
  // One after another: both run `pnpm deploy` on the one workspace.
  const api = await buildProductionCommand('api', dir);
  const dispatcher = await buildProductionCommand('webhook-dispatcher', dir);
  return { api, dispatcher };
}
