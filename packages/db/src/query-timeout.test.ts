import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const QUERY_TIMEOUT = pathToFileURL(fileURLToPath(new URL('./query-timeout.ts', import.meta.url))).href;

/**
 * In a fresh process (the test runner itself keeps async hooks on): the own symbols of a promise made
 * during `withoutQueryTimeout`'s work and of one made after it ended.
 */
function promiseSymbolsAroundExemptRun(): { during: string[]; after: string[] } {
  const script = `
    const { withoutQueryTimeout } = await import(${JSON.stringify(QUERY_TIMEOUT)});
    const symbols = (promise) => Object.getOwnPropertySymbols(promise).map(String);
    let during = [];
    await withoutQueryTimeout(async () => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      during = symbols(new Promise(() => {}));
    });
    await new Promise((resolve) => setImmediate(resolve));
    process.stdout.write(JSON.stringify({ during, after: symbols(new Promise(() => {})) }));
  `;
  const output = execFileSync(process.execPath, ['--import', TSX_LOADER, '--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  return JSON.parse(output) as { during: string[]; after: string[] };
}

describe('withoutQueryTimeout', () => {
  it("turns Node's async hooks off again once the exempt work ended, so later promises carry no async ids", () => {
    const { during, after } = promiseSymbolsAroundExemptRun();
    // While the migration runs the storage is live (its queries are exempt from the deadline)…
    expect(during).toContain('Symbol(kResourceStore)');
    // …but it must not leave every promise of the pod's life tracked by async hooks.
    expect(after).toEqual([]);
  });
});
