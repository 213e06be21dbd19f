import { writeFile } from 'node:fs/promises';
import { renderConfigurationReference, undocumentedVariables } from './config-reference.js';
import { CONFIG_SOURCES } from './config-sources.js';
import { renderErrorReference } from './error-reference.js';

// `pnpm docs:config`: regenerates docs/configuration.md from the apps' environment schemas, and
// docs/errors.md from docs/build/error-reference.ts.
const target = new URL('../configuration.md', import.meta.url);
await writeFile(target, renderConfigurationReference(CONFIG_SOURCES));
const missing = undocumentedVariables(CONFIG_SOURCES);
if (missing.length > 0) {
  console.error(`undocumented variables (add them to docs/build/config-descriptions.ts): ${missing.join(', ')}`);
  process.exitCode = 1;
}
console.log(`wrote ${target.pathname}`);
const errors = new URL('../errors.md', import.meta.url);
await writeFile(errors, renderErrorReference());
console.log(`wrote ${errors.pathname}`);
