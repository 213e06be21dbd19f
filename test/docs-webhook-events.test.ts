import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { renderEventCatalogReference } from '../docs/build/event-catalog-reference.js';
import { WEBHOOK_EVENT_CATALOG } from '../packages/contracts/src/index.js';

// docs/webhook-events.md is generated from the event catalog; this fails when an event type, a field,
// a description or an example changes without `pnpm docs:events`.

describe('docs/webhook-events.md', () => {
  it('is what `pnpm docs:events` generates from the event catalog today', async () => {
    const committed = await readFile(new URL('../docs/webhook-events.md', import.meta.url), 'utf8');
    expect(committed).toBe(renderEventCatalogReference(WEBHOOK_EVENT_CATALOG));
  });

  it('lists every type with a field table row per body field and its example', () => {
    const reference = renderEventCatalogReference(WEBHOOK_EVENT_CATALOG);
    for (const entry of WEBHOOK_EVENT_CATALOG) {
      expect(reference).toContain(`## \`${entry.type}\``);
      expect(reference).toContain(JSON.stringify(entry.example, null, 2));
    }
    expect(reference).toContain('| `data.tags` | list of string | Tags of the post, each once. |');
    expect(reference).toContain('| `data.lastError` | string or null |');
  });

  it('follows a changed catalog (the check is real)', () => {
    const [first, ...rest] = WEBHOOK_EVENT_CATALOG;
    const changed = renderEventCatalogReference([{ ...first!, description: 'Something else.' }, ...rest]);
    expect(changed).not.toBe(renderEventCatalogReference(WEBHOOK_EVENT_CATALOG));
    expect(changed).toContain('Something else.');
  });
});
