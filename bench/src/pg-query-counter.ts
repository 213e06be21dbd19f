/**
 * Preloaded into the dispatcher by the webhook benchmark (`--import`): counts the queries its `pg`
 * clients send (each one is a round trip: `pg` does not pipeline; BEGIN and COMMIT count too), and
 * prints the running total on stdout every 100 ms as `pg-queries <n>`.
 */
import pg from 'pg';

let queries = 0;
const query = pg.Client.prototype.query;
pg.Client.prototype.query = function counted(this: pg.Client, ...args: unknown[]) {
  queries++;
  return (query as (...a: unknown[]) => unknown).apply(this, args);
} as typeof query;
const print = () => process.stdout.write(`pg-queries ${queries}\n`);
setInterval(print, 100).unref();
process.once('beforeExit', print);
