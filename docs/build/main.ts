import { writeFile } from 'node:fs/promises';
import { renderConfigurationReference, undocumentedVariables } from './config-reference.js';
import { CONFIG_SOURCES } from './config-sources.js';

// `pnpm docs:config`: regenerates docs/configuration.md from the apps' environment schemas.
const target = new URL('../configuration.md', import.meta.url);
await writeFile(target, renderConfigurationReference(CONFIG_SOURCES));
const missing = undocumentedVariables(CONFIG_SOURCES);
if (missing.length > 0) {
  console.error(`undocumented variables (add them to docs/build/config-descriptions.ts): ${missing.join(', ')}`);
  process.exitCode = 1;
}
console.log(`wrote ${target.pathname}`);
