import { resolve } from 'node:path';
import {
  buildConsole,
  DEFAULT_CONSOLE_OUT_DIR,
  describeBuild,
  isConsoleBuildStale,
  watchConsole,
} from './build-console.js';

// `pnpm --filter @herald/console build [outDir]`: bundle the console.
//   --if-stale   do nothing when the build is newer than every source (what `pnpm start` runs)
//   --watch      rebuild on every change (development)
const args = process.argv.slice(2);
const flags = new Set(args.filter((arg) => arg.startsWith('--')));
const outDir = resolve(args.find((arg) => !arg.startsWith('--')) ?? DEFAULT_CONSOLE_OUT_DIR);
const unknown = [...flags].filter((flag) => flag !== '--if-stale' && flag !== '--watch');
if (unknown.length > 0) {
  process.stderr.write(`usage: build-console [--if-stale | --watch] [outDir]; unknown ${unknown.join(' ')}\n`);
  process.exit(2);
}

try {
  if (flags.has('--watch')) {
    await watchConsole(outDir);
    process.stdout.write(`console: watching the sources, writing ${outDir}\n`);
  } else if (!flags.has('--if-stale') || isConsoleBuildStale(outDir)) {
    process.stdout.write(`console: built ${describeBuild(await buildConsole({ outDir }))}\n`);
  }
} catch (error) {
  process.stderr.write(`console: build failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
}
