import { buildConsole, describeBuild, isConsoleBuildStale } from '../../apps/console/src/build/build-console.js';
import { buildStartBundle, isStartBundleStale, START_BUNDLE } from './start-bundle.js';

// `pnpm start`'s first step, in one process: (re)build the console (apps/console/dist) and the API's
// bundle (apps/api/dist/main.js, see start-bundle.ts), each only when older than its sources with
// --if-stale. `pnpm start` then runs `node apps/api/dist/main.js`.
const args = process.argv.slice(2);
const unknown = args.filter((arg) => arg !== '--if-stale');
if (unknown.length > 0) {
  process.stderr.write(`usage: start-cli [--if-stale]; unknown ${unknown.join(' ')}\n`);
  process.exit(2);
}
const always = !args.includes('--if-stale');

try {
  if (always || isConsoleBuildStale()) process.stdout.write(`console: built ${describeBuild(await buildConsole())}\n`);
} catch (error) {
  process.stderr.write(`console: build failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
}
try {
  if (always || isStartBundleStale()) {
    const started = performance.now();
    const { inputs } = await buildStartBundle();
    const ms = Math.round(performance.now() - started);
    process.stdout.write(`api: bundled ${inputs} source files into ${START_BUNDLE} in ${ms} ms\n`);
  }
} catch (error) {
  process.stderr.write(`api: bundle failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
}
