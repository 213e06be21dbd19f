import { readdir, readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { renderConfigurationReference, undocumentedVariables } from '../docs/build/config-reference.js';
import { CONFIG_SOURCES } from '../docs/build/config-sources.js';
import { TRACING_VARIABLES } from '../packages/telemetry/src/tracing-variables.js';

// docs/configuration.md is generated from the apps' environment schemas; this fails when a variable is
// added, removed or given another default without `pnpm docs:config`.

describe('docs/configuration.md', () => {
  it('is what `pnpm docs:config` generates from the environment schemas today', async () => {
    const committed = await readFile(new URL('../docs/configuration.md', import.meta.url), 'utf8');
    expect(committed).toBe(renderConfigurationReference(CONFIG_SOURCES));
  });

  it('describes every variable of every app', () => {
    expect(undocumentedVariables(CONFIG_SOURCES)).toEqual([]);
  });

  it('lists each variable with its default, or as required, from the schema itself', () => {
    const reference = renderConfigurationReference(CONFIG_SOURCES);
    expect(reference).toContain('| `WS_KEEPALIVE_MS` | `12000` | integer 1–30000 |');
    expect(reference).toContain('| `WEBHOOK_RETRY_HORIZON` | `3d` | duration |');
    expect(reference).toMatch(/\| `DATABASE_URL` \| \*\*required\*\* \| URL \| PostgreSQL URL: the same database/);
  });

  it('follows a changed schema (the check is real)', () => {
    const [api] = CONFIG_SOURCES;
    const shape = { ...api!.schema.shape };
    delete shape.WS_KEEPALIVE_MS;
    const changed = renderConfigurationReference([{ ...api!, schema: { shape } }]);
    expect(changed).not.toContain('WS_KEEPALIVE_MS');
    expect(undocumentedVariables([{ ...api!, schema: { shape: { ...shape, NEW_VARIABLE: shape.PORT! } } }])).toEqual([
      'api:NEW_VARIABLE',
    ]);
  });

  it('lists every OpenTelemetry variable the telemetry package reads', async () => {
    const dir = new URL('../packages/telemetry/src/', import.meta.url);
    const sources = (await readdir(dir)).filter((file) => file.endsWith('.ts') && !file.endsWith('.test.ts'));
    const read = new Set<string>();
    for (const file of sources) {
      const text = await readFile(new URL(file, dir), 'utf8');
      for (const [name] of text.matchAll(/OTEL_[A-Z_]+/g)) read.add(name);
    }
    const listed = new Set(TRACING_VARIABLES.flatMap((variable) => variable.names));
    expect(read.size).toBeGreaterThan(5);
    expect([...read].filter((name) => !listed.has(name))).toEqual([]);
    const reference = renderConfigurationReference(CONFIG_SOURCES);
    for (const name of listed) expect(reference).toContain(`\`${name}\``);
  });
});
