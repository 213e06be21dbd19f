import { APPS, isAppName } from './apps.js';
import { buildApp } from './build-app.js';

// `pnpm build:prod <app> <outdir>`: the production build the Dockerfile runs (see build-app.ts).
const [appName, outDir] = process.argv.slice(2);
if (!appName || !isAppName(appName) || !outDir) {
  process.stderr.write(`usage: pnpm build:prod <${Object.keys(APPS).join('|')}> <outdir>\n`);
  process.exit(2);
}
const started = performance.now();
try {
  const result = await buildApp(appName, outDir, (line) => process.stdout.write(`build:prod ${appName}: ${line}\n`));
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  process.stdout.write(`build:prod ${appName}: wrote ${result.outDir} in ${seconds} s\n`);
} catch (error) {
  process.stderr.write(`build:prod ${appName}: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
}
