/**
 * What checking an event body against the event catalog costs before it is recorded
 * (`assertValidWebhookEvent` in @herald/db: `JSON.parse` of the body text, then TypeBox's compiled
 * validator), per event type, on the catalog's example bodies; beside it the check on an already parsed
 * object (the validator alone) and `JSON.stringify` of the same body (what building it costs anyway).
 * CPU µs of this process per check, the median of `rounds` rounds of `checks` checks each.
 *
 *   node --import tsx bench/micro/event-check-micro.ts [checks=100000] [rounds=3]
 */
import { checkWebhookEventBody, WEBHOOK_EVENT_CATALOG } from '../../packages/contracts/src/index.js';

const checks = Number(process.argv[2] ?? 100_000);
const rounds = Number(process.argv[3] ?? 3);
const median = (list: number[]) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)]!;

function cpuPer(work: () => unknown): number {
  const results: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const before = process.cpuUsage();
    for (let i = 0; i < checks; i++) work();
    const used = process.cpuUsage(before);
    results.push((used.user + used.system) / checks);
  }
  return median(results);
}

process.stdout.write(`checks=${checks} rounds=${rounds}; CPU µs per operation (median of rounds)\n`);
process.stdout.write(
  '| type | body bytes | check (JSON text) | check (object) | JSON.stringify |\n| --- | --- | --- | --- | --- |\n',
);
for (const entry of WEBHOOK_EVENT_CATALOG) {
  const text = JSON.stringify(entry.example);
  if (checkWebhookEventBody(entry.type, text)) throw new Error(`${entry.type}: the example does not pass`);
  const fromText = cpuPer(() => checkWebhookEventBody(entry.type, text));
  const fromObject = cpuPer(() => checkWebhookEventBody(entry.type, entry.example));
  const stringify = cpuPer(() => JSON.stringify(entry.example));
  process.stdout.write(
    `| ${entry.type} | ${text.length} | ${fromText.toFixed(2)} | ${fromObject.toFixed(2)} | ${stringify.toFixed(2)} |\n`,
  );
}
