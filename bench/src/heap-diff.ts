/**
 * Where a subscribed socket's memory goes (issue 14): V8 heap snapshots of one server at `--from` and at
 * `--to` subscribed sockets (same process, same load clients), diffed per constructor/closure name and
 * divided by the sockets added, next to RSS per socket over the same step.
 *
 *   node --import tsx bench/src/heap-diff.ts --scenario embedded --from 1000 --to 10000
 *   node --import tsx bench/src/heap-diff.ts --scenario raw
 *
 * Prints a markdown section (paste it into bench/results/PROFILE.md). Needs DATABASE_URL for Herald.
 * The snapshots are written by the server itself (`v8.writeHeapSnapshot` through the inspector).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cleanupAll, installExitHandlers, procSample } from './common.js';
import { type FanoutConfig, LoadClients } from './fanout.js';
import { inspectorCall, memoryAfterGc } from './inspector.js';
import { PEERS, type Peer } from './protocol.js';
import { startHeraldTarget, startPeerTarget, startRawTarget, type Target, waitForSubscriptions } from './targets.js';

/** Rows of the per-socket table. */
const TOP_ROWS = 25;
/** Writing a snapshot of a server holding 10k sockets takes tens of seconds on a busy machine. */
const SNAPSHOT_TIMEOUT_MS = 600_000;

interface Aggregate {
  count: number;
  bytes: number;
}

/** Self size and count per `type:name` of a V8 heap snapshot (only nodes reachable after a full GC). */
export function aggregateSnapshot(file: string): { total: number; byKey: Map<string, Aggregate> } {
  const snapshot = JSON.parse(readFileSync(file, 'utf8')) as {
    snapshot: { meta: { node_fields: string[]; node_types: [string[]] } };
    nodes: number[];
    strings: string[];
  };
  const fields = snapshot.snapshot.meta.node_fields;
  const width = fields.length;
  const typeAt = fields.indexOf('type');
  const nameAt = fields.indexOf('name');
  const sizeAt = fields.indexOf('self_size');
  const types = snapshot.snapshot.meta.node_types[0];
  const byKey = new Map<string, Aggregate>();
  let total = 0;
  for (let i = 0; i < snapshot.nodes.length; i += width) {
    const type = types[snapshot.nodes[i + typeAt]!]!;
    let name = snapshot.strings[snapshot.nodes[i + nameAt]!] ?? '';
    // Strings and numbers are keyed by type only; their content would make every one its own row.
    if (type === 'string' || type === 'concatenated string' || type === 'sliced string' || type === 'number') name = '';
    if (name.length > 60) name = `${name.slice(0, 57)}…`;
    const key = `${type}:${name}`;
    const size = snapshot.nodes[i + sizeAt]!;
    total += size;
    const entry = byKey.get(key) ?? { count: 0, bytes: 0 };
    entry.count++;
    entry.bytes += size;
    byKey.set(key, entry);
  }
  return { total, byKey };
}

async function snapshotOf(target: Target, dir: string, label: string): Promise<string> {
  const file = join(dir, `${label}.heapsnapshot`);
  const result = await inspectorCall(
    target.inspectors[0]!,
    'Runtime.evaluate',
    {
      expression: `require('node:v8').writeHeapSnapshot(${JSON.stringify(file)})`,
      includeCommandLineAPI: true,
      returnByValue: true,
    },
    SNAPSHOT_TIMEOUT_MS,
  );
  if (result.exceptionDetails) throw new Error(`writeHeapSnapshot: ${JSON.stringify(result.exceptionDetails)}`);
  return file;
}

async function start(scenario: string): Promise<Target> {
  if (scenario === 'raw') return startRawTarget();
  if ((PEERS as readonly string[]).includes(scenario)) return startPeerTarget(scenario as Peer);
  if (scenario !== 'embedded') throw new Error(`--scenario raw, embedded or a peer (${PEERS.join(', ')})`);
  return startHeraldTarget({
    pods: 1,
    pubsub: 'memory',
    databaseUrl: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
    database: 'postgres',
    label: 'embedded',
  });
}

async function main() {
  const args = new Map<string, string>();
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) args.set(argv[i]!.replace(/^--/, ''), argv[i + 1] ?? '');
  const scenario = args.get('scenario') ?? 'embedded';
  const from = Number(args.get('from') ?? 1000);
  const to = Number(args.get('to') ?? 10_000);
  installExitHandlers();
  const dir = mkdtempSync(join(tmpdir(), 'herald-heap-'));
  const target = await start(scenario);
  const config = (sockets: number): FanoutConfig =>
    ({
      sockets,
      localAddresses: ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5'],
      connectConcurrency: 64,
    }) as FanoutConfig;
  const first = new LoadClients(2);
  const second = new LoadClients(2);
  try {
    // One publish warms the publish path (and Herald's lazily built parts) before the first snapshot.
    const [warm] = await target.prepareEvents(1);
    await target.publish(warm!);
    await first.connect(target, config(from));
    await waitForSubscriptions(target, from, 60_000);
    const a = aggregateSnapshot(await snapshotOf(target, dir, 'from'));
    // Read after the first snapshot, whose own allocations would otherwise count as the sockets' RSS.
    const small = await memoryAfterGc(target.pids, target.inspectors);
    await second.connect(target, config(to - from));
    await waitForSubscriptions(target, to, 120_000);
    const large = await memoryAfterGc(target.pids, target.inspectors);
    const b = aggregateSnapshot(await snapshotOf(target, dir, 'to'));
    const added = to - from;
    const rows = [...b.byKey.entries()]
      .map(([key, entry]) => {
        const before = a.byKey.get(key) ?? { count: 0, bytes: 0 };
        return {
          key,
          perSocketBytes: (entry.bytes - before.bytes) / added,
          perSocketCount: (entry.count - before.count) / added,
        };
      })
      .sort((x, y) => y.perSocketBytes - x.perSocketBytes);
    const lines = [
      `### ${target.label}: heap ${from} → ${to} sockets`,
      '',
      `RSS after GC ${Math.round(small.rssBytes / 2 ** 20)} → ${Math.round(large.rssBytes / 2 ** 20)} MiB: **${((large.rssBytes - small.rssBytes) / added / 1024).toFixed(2)} KB RSS per socket**; V8 heap ${((large.heapUsedBytes - small.heapUsedBytes) / added / 1024).toFixed(2)} KB per socket (snapshot self sizes: ${((b.total - a.total) / added / 1024).toFixed(2)} KB); the rest of RSS is outside the V8 heap (socket buffers, libuv/OpenSSL-free native state, allocator).`,
      '',
      '| heap node (type:name) | bytes per socket | objects per socket |',
      '|---|---:|---:|',
      ...rows
        .slice(0, TOP_ROWS)
        .map(
          (row) =>
            `| \`${row.key.replace(/\|/g, '\\|')}\` | ${row.perSocketBytes.toFixed(0)} | ${row.perSocketCount.toFixed(2)} |`,
        ),
      '',
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
    process.stderr.write(
      `server pid ${target.pids[0]} RSS now ${Math.round(procSample(target.pids[0]!).rssBytes / 2 ** 20)} MiB\n`,
    );
  } finally {
    await first.close();
    await second.close();
    await target.stop();
    rmSync(dir, { recursive: true, force: true });
    await cleanupAll();
  }
}

main().catch(async (error: unknown) => {
  process.stderr.write(`heap-diff failed: ${(error as Error).stack ?? error}\n`);
  await cleanupAll();
  process.exit(1);
});
