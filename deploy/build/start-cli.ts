import { buildConsole, describeBuild, isConsoleBuildStale } from '../../apps/console/src/build/build-console.js';
import {
  buildEmbeddedTemplate,
  embeddedTemplateKey,
  isEmbeddedTemplateStale,
} from '../../packages/db/src/embedded-template-build.js';
import { buildStartBundle, EMBEDDED_TEMPLATE_DIR, isStartBundleStale, START_BUNDLE } from './start-bundle.js';

// `pnpm install`'s postinstall and `pnpm start`'s first step, in one process: (re)build the console
// (apps/console/dist), the API's bundle (apps/api/dist/main.js, see start-bundle.ts), each only when older than its sources with
// --if-stale, and the embedded database template beside the bundle (packages/db/src/embedded-template.ts)
// when built from other migrations or another PGlite (not with DATABASE_URL set: no embedded database).
// `pnpm start` then runs `node apps/api/dist/main.js`.
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
if (!process.env.DATABASE_URL) {
  try {
    const key = embeddedTemplateKey();
    if (always || isEmbeddedTemplateStale(EMBEDDED_TEMPLATE_DIR, key)) {
      const started = performance.now();
      const migrations = await buildEmbeddedTemplate(EMBEDDED_TEMPLATE_DIR, key);
      const ms = Math.round(performance.now() - started);
      process.stdout.write(`database: embedded template with ${migrations.length} migrations built in ${ms} ms\n`);
    }
  } catch (error) {
    // Not fatal: without a template a first start creates its database itself (initdb + migrations).
    process.stderr.write(
      `database: embedded template not built: ${error instanceof Error ? error.message : String(error)}\n`,
    );
  }
}
