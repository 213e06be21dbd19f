/**
 * Preloaded into the dispatcher by the webhook benchmark (`--import`): counts the queries its `pg`
 * clients send (each one is a round trip: `pg` does not pipeline; BEGIN and COMMIT count too), and
 * prints the running total on stdout every 100 ms as `pg-queries <n>`.
 *
 * `pg` is the dispatcher's own copy: resolved from BENCH_PG_FROM when set (a production build's
 * `dist/main.js`, whose pruned node_modules hold it; this file then runs compiled to JavaScript beside
 * it, see `buildDispatcherImage`), else from here, which in the workspace is the same package.
 */
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type PgModule from 'pg';

const pg = createRequire(process.env.BENCH_PG_FROM ?? import.meta.url)('pg') as typeof PgModule;

let queries = 0;
/** With BENCH_PG_QUERY_LOG=<file>: queries by their first 80 characters, written there at exit. */
const byText = process.env.BENCH_PG_QUERY_LOG ? new Map<string, number>() : undefined;
const query = pg.Client.prototype.query;
pg.Client.prototype.query = function counted(this: PgModule.Client, ...args: unknown[]) {
  queries++;
  if (byText) {
    const first = args[0];
    const text = (typeof first === 'string' ? first : String((first as { text?: string })?.text ?? '?'))
      .replace(/\s+/g, ' ')
      .trim()
      .slice(0, 80);
    byText.set(text, (byText.get(text) ?? 0) + 1);
  }
  return (query as (...a: unknown[]) => unknown).apply(this, args);
} as typeof query;
const print = () => process.stdout.write(`pg-queries ${queries}\n`);
setInterval(print, 100).unref();
process.once('beforeExit', print);
if (byText) {
  process.once('exit', () => {
    const lines = [...byText].sort((a, b) => b[1] - a[1]).map(([text, n]) => `${n}\t${text}`);
    writeFileSync(`${process.env.BENCH_PG_QUERY_LOG}.${process.pid}`, `${lines.join('\n')}\n`);
  });
}
