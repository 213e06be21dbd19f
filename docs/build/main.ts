import { readFile, writeFile } from 'node:fs/promises';
import { renderSchemaGuide } from '../../apps/api/src/schema/schema-guide.js';
import { renderConfigurationReference, undocumentedVariables } from './config-reference.js';
import { CONFIG_SOURCES } from './config-sources.js';
import { renderErrorReference } from './error-reference.js';

// `pnpm docs:config`: regenerates docs/configuration.md from the apps' environment schemas,
// docs/errors.md from docs/build/error-reference.ts, and docs/graphql.md from apps/api/schema.graphql.
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
const guide = new URL('../graphql.md', import.meta.url);
const sdl = await readFile(new URL('../../apps/api/schema.graphql', import.meta.url), 'utf8');
await writeFile(guide, renderSchemaGuide(sdl));
console.log(`wrote ${guide.pathname}`);
