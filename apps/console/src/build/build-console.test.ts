import { mkdtemp, readFile, rm, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConsole, type ConsoleBuildResult, isConsoleBuildStale } from './build-console.js';

/** The console ships to operators' browsers on every page load: keep it small (Preact, no framework bloat). */
const MAX_SCRIPT_BYTES = 60 * 1024;

let outDir: string;
let result: ConsoleBuildResult;

beforeAll(async () => {
  outDir = await mkdtemp(join(tmpdir(), 'herald-console-build-'));
  result = await buildConsole({ outDir });
});

afterAll(() => rm(outDir, { recursive: true, force: true }));

describe('buildConsole', () => {
  it('writes index.html naming a content-hashed script and stylesheet that exist', async () => {
    const html = await readFile(join(outDir, 'index.html'), 'utf8');
    const script = /<script type="module" src="\.\/(console-[\w]+\.js)">/.exec(html)?.[1];
    const stylesheet = /<link rel="stylesheet" href="\.\/(console-[\w]+\.css)"/.exec(html)?.[1];
    expect(script).toBeDefined();
    expect(stylesheet).toBeDefined();
    expect(Object.keys(result.files).sort()).toEqual([stylesheet, script, 'index.html'].sort());
    expect(html).not.toContain('%SCRIPT%');
  });

  it('bundles Preact and the views into one minified browser script within the size budget', async () => {
    const [script] = Object.keys(result.files).filter((file) => file.endsWith('.js'));
    const code = await readFile(join(outDir, script!), 'utf8');
    expect(result.files[script!]).toBeLessThan(MAX_SCRIPT_BYTES);
    // No bare imports left for a browser to fail on, and no Node globals.
    expect(/\bimport\s*[{*"'(]/.test(code), 'an import statement is left in the bundle').toBe(false);
    expect(code.includes('process.env'), 'process.env is left in the bundle').toBe(false);
    // It talks to the public GraphQL endpoint beside /console, nothing else.
    expect(code.includes('"../graphql"')).toBe(true);
    expect(code.includes('replayDeadWebhookDeliveries')).toBe(true);
  });

  it('is stale when index.html is missing or a source is newer, fresh right after a build', async () => {
    expect(isConsoleBuildStale(outDir)).toBe(false);
    const empty = await mkdtemp(join(tmpdir(), 'herald-console-empty-'));
    try {
      expect(isConsoleBuildStale(empty)).toBe(true);
    } finally {
      await rm(empty, { recursive: true, force: true });
    }
    // A build older than every source (whenever the sources were last edited).
    const longAgo = new Date(1_000);
    await utimes(join(outDir, 'index.html'), longAgo, longAgo);
    expect(isConsoleBuildStale(outDir)).toBe(true);
  });
});
