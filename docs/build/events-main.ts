import { writeFile } from 'node:fs/promises';
import { WEBHOOK_EVENT_CATALOG } from '../../packages/contracts/src/index.js';
import { renderEventCatalogReference } from './event-catalog-reference.js';

// `pnpm docs:events`: regenerates docs/webhook-events.md from the event catalog.
const target = new URL('../webhook-events.md', import.meta.url);
await writeFile(target, renderEventCatalogReference(WEBHOOK_EVENT_CATALOG));
console.log(`wrote ${target.pathname}`);
