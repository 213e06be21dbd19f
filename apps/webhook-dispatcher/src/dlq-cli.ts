/**
 * Operators' dead-letter CLI (docs/operations.md, "Dead letters: list and replay"): `pnpm dlq list
 * [--json]`, `pnpm dlq replay <delivery-id>…` and `pnpm dlq replay --all`. Reads the DEAD deliveries in the database (their one record; any number of
 * them, page by page). Reads DATABASE_URL like the dispatcher. Exit status 0 on success, 1 on an
 * error, 2 on bad usage.
 */
import { InvalidConfigError } from '@herald/config';
import { createDatabase } from '@herald/db';
import { listDeadLetters, replayDeadLetters } from '@herald/webhook-engine';
import { loadDispatcherConfig } from './env.js';

const USAGE = 'usage: dlq list [--json] | dlq replay <delivery-id>… | dlq replay --all';

const [command, ...args] = process.argv.slice(2);
if (command !== 'list' && command !== 'replay') {
  process.stderr.write(`${USAGE}\n`);
  process.exit(2);
}
if (command === 'replay' && args.length === 0) {
  process.stderr.write(`${USAGE}\n`);
  process.exit(2);
}

let config: ReturnType<typeof loadDispatcherConfig>;
try {
  config = loadDispatcherConfig();
} catch (error) {
  if (error instanceof InvalidConfigError) {
    for (const line of error.lines) process.stderr.write(`dlq: invalid configuration: ${line}\n`);
    process.exit(1);
  }
  throw error;
}

const database = await createDatabase({ kind: 'postgres', url: config.databaseUrl, poolMax: 2 });
let exitCode = 0;
try {
  if (command === 'list') {
    const json = args.includes('--json');
    let count = 0;
    if (json) process.stdout.write('[');
    for await (const view of listDeadLetters(database.db)) {
      const { letter } = view;
      if (json) {
        process.stdout.write(`${count > 0 ? ',' : ''}\n${JSON.stringify(view)}`);
      } else {
        process.stdout.write(
          `${letter.deliveryId}  DEAD  ${letter.eventType} ${letter.eventId}  org=${letter.orgId}  ${letter.url}  ` +
            `attempts=${letter.attempts}  last=${letter.lastStatusCode ?? '-'} ${letter.lastError ?? ''}  dead=${letter.deadAt}\n`,
        );
      }
      count++;
    }
    if (json) process.stdout.write('\n]\n');
    else if (count === 0) process.stdout.write('no dead letters\n');
    else process.stdout.write(`${count} dead letter(s); replay with: dlq replay <delivery-id> | dlq replay --all\n`);
  } else {
    const all = args.includes('--all');
    // The same paged path as GraphQL's replayDeadWebhookDeliveries: one statement per page.
    const found = new Set<string>();
    const replayed = await replayDeadLetters(database.db, all ? { all: true } : { ids: args }, {
      onPage: (ids) => {
        for (const id of ids) {
          process.stdout.write(`replayed ${id}\n`);
          if (!all) found.add(id);
        }
      },
    });
    if (!all) {
      for (const id of args.filter((id) => !found.has(id))) process.stderr.write(`not DEAD or not found: ${id}\n`);
    }
    process.stdout.write(`${replayed} replayed\n`);
  }
} catch (error) {
  process.stderr.write(`dlq: ${error instanceof Error ? error.message : String(error)}\n`);
  exitCode = 1;
} finally {
  await database.close();
}
// stdout to a pipe is asynchronous: let it drain, or a long listing is cut short by the exit.
await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
process.exit(exitCode);
