import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const HELPER = pathToFileURL(fileURLToPath(new URL('./source-maps.ts', import.meta.url))).href;
/** Lines of the generated bundle, one mapping each: about the API bundle's 60,000. */
const LINES = 60_000;

let dir: string;
let bundle: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'herald-source-maps-'));
  bundle = join(dir, 'bundle.mjs');
  // A bundle whose every line maps to the line of the same number in `app.ts` (column 0): "AAAA" for the
  // first line, "AACA" (one line down) for each after it.
  const lines = ['export function boom() { return new Error("boom").stack ?? ""; }'];
  for (let n = 1; n < LINES; n++) lines.push(`export const v${n} = ${n};`);
  writeFileSync(bundle, `${lines.join('\n')}\n//# sourceMappingURL=bundle.mjs.map\n`);
  const map = { version: 3, sources: ['app.ts'], names: [], mappings: `AAAA${';AACA'.repeat(LINES - 1)}` };
  writeFileSync(`${bundle}.map`, JSON.stringify(map));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Run {
  parsedAtStart: boolean;
  /** Live heap growth, MB, from formatting the first stack through the bundle. */
  firstStackMb: number;
  frame: string;
}

/** Loads the bundle in a fresh process with source maps on, optionally parses its map at once, then formats a stack through it. */
function run(options: { parseAtStart: boolean }): Run {
  const script = `
    import v8 from 'node:v8';
    const { parseSourceMapNow } = await import(${JSON.stringify(HELPER)});
    const url = ${JSON.stringify(pathToFileURL(bundle).href)};
    const { boom } = await import(url);
    const live = () => { gc(); gc(); return v8.getHeapStatistics().used_heap_size / 1_048_576; };
    const parsedAtStart = ${options.parseAtStart} ? parseSourceMapNow(url) : false;
    const before = live();
    const frame = boom().split('\\n')[1].trim();
    const firstStackMb = live() - before;
    console.log(JSON.stringify({ parsedAtStart, firstStackMb, frame }));
  `;
  // tsx (which loads the helper's TypeScript) turns source maps on by itself; the flag says it as the images do.
  const flags = ['--expose-gc', '--enable-source-maps', '--import', TSX_LOADER];
  const output = execFileSync(process.execPath, [...flags, '--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 30_000,
    env: { PATH: process.env.PATH ?? '' },
  });
  return JSON.parse(output) as Run;
}

describe('parseSourceMapNow: a bundle’s source map parsed at start, not at the first error', () => {
  it('without it, the first stack through the bundle parses the map and the heap keeps megabytes of it', () => {
    const lazy = run({ parseAtStart: false });
    expect(lazy.frame).toContain('app.ts:1:');
    expect(lazy.firstStackMb).toBeGreaterThan(2);
  });

  it('with it, the map is parsed at start: the first stack still names the source, and the heap barely moves', () => {
    const eager = run({ parseAtStart: true });
    expect(eager.parsedAtStart).toBe(true);
    expect(eager.frame).toContain('app.ts:1:');
    // The parsed map is ~6.5 MB here (the test above); formatting the first stack still allocates 0.4–0.6 MB of
    // its own, more on a slow host, so the bound is well under the map and well over that.
    expect(eager.firstStackMb).toBeLessThan(1.5);
  });
});
