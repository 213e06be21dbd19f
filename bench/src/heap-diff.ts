/**
 * Where a subscribed socket's memory goes: V8 heap snapshots of one server at `--from` and at
 * `--to` subscribed sockets (same process, same load clients), diffed per constructor/closure name and
 * divided by the sockets added, next to RSS per socket over the same step.
 *
 *   node --import tsx bench/src/heap-diff.ts --scenario embedded --from 1000 --to 10000
 *   node --import tsx bench/src/heap-diff.ts --scenario raw
 *   … --rows 80 --keep /tmp/heap   (more rows; keep the snapshots to open in DevTools)
 *
 * Prints a markdown section (paste it into a hand-written file under bench/results/profiles/, listed in
 * bench/results/PROFILE.md). Needs DATABASE_URL for Herald.
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
const TOP_ROWS = 40;
/** Writing a snapshot of a server holding 10k sockets takes tens of seconds on a busy machine. */
const SNAPSHOT_TIMEOUT_MS = 600_000;

interface Aggregate {
  count: number;
  bytes: number;
}

/**
 * Self size and count per heap node kind: closures by function name and source location (file:line),
 * other objects by type:name and the edge that first retains them (`via Parent.edge`), so that "31 plain
 * Objects" becomes "the graphql-ws context's `extra`" etc. Strings and numbers are keyed by retainer too.
 */
export function aggregateSnapshot(file: string): { total: number; byKey: Map<string, Aggregate> } {
  const snapshot = JSON.parse(readFileSync(file, 'utf8')) as {
    snapshot: {
      meta: { node_fields: string[]; node_types: [string[]]; edge_fields: string[]; edge_types: [string[]] };
    };
    nodes: number[];
    edges: number[];
    locations?: number[];
    strings: string[];
  };
  const { meta } = snapshot.snapshot;
  const { nodes, edges, strings } = snapshot;
  const width = meta.node_fields.length;
  const typeAt = meta.node_fields.indexOf('type');
  const nameAt = meta.node_fields.indexOf('name');
  const sizeAt = meta.node_fields.indexOf('self_size');
  const edgeCountAt = meta.node_fields.indexOf('edge_count');
  const edgeWidth = meta.edge_fields.length;
  const edgeTypeAt = meta.edge_fields.indexOf('type');
  const edgeNameAt = meta.edge_fields.indexOf('name_or_index');
  const edgeToAt = meta.edge_fields.indexOf('to_node');
  const nodeTypes = meta.node_types[0];
  const edgeTypes = meta.edge_types[0];
  const count = nodes.length / width;
  const typeOf = (n: number) => nodeTypes[nodes[n * width + typeAt]!]!;
  const nameOf = (n: number) => strings[nodes[n * width + nameAt]!] ?? '';
  const short = (text: string, max = 40) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

  // First retainer of every node (the first strong edge met in snapshot order), and closure → file.
  const retainer = new Int32Array(count).fill(-1);
  const retainerEdge = new Array<string>(count);
  const scriptOfFunction = new Map<number, string>();
  let edgeIndex = 0;
  const firstEdge = new Int32Array(count);
  for (let n = 0; n < count; n++) {
    firstEdge[n] = edgeIndex;
    const edgeCount = nodes[n * width + edgeCountAt]!;
    for (let e = 0; e < edgeCount; e++, edgeIndex += edgeWidth) {
      const kind = edgeTypes[edges[edgeIndex + edgeTypeAt]!];
      if (kind === 'weak' || kind === 'shortcut') continue;
      const to = edges[edgeIndex + edgeToAt]! / width;
      if (retainer[to] !== -1) continue;
      retainer[to] = n;
      const label = edges[edgeIndex + edgeNameAt]!;
      retainerEdge[to] = kind === 'element' || kind === 'hidden' ? `[${label}]` : (strings[label] ?? '?');
    }
  }
  const edgeTarget = (n: number, name: string): number => {
    const edgeCount = nodes[n * width + edgeCountAt]!;
    for (let e = 0, i = firstEdge[n]!; e < edgeCount; e++, i += edgeWidth) {
      const kind = edgeTypes[edges[i + edgeTypeAt]!];
      if (kind !== 'element' && kind !== 'hidden' && strings[edges[i + edgeNameAt]!] === name) {
        return edges[i + edgeToAt]! / width;
      }
    }
    return -1;
  };
  const lineOf = new Map<number, number>();
  const locations = snapshot.locations ?? [];
  for (let i = 0; i + 3 < locations.length; i += 4) lineOf.set(locations[i]! / width, locations[i + 2]! + 1);
  const fileOf = (closure: number): string => {
    const shared = edgeTarget(closure, 'shared');
    if (shared < 0) return '?';
    let file = scriptOfFunction.get(shared);
    if (file === undefined) {
      const script = edgeTarget(shared, 'script_or_debug_info');
      const url = script < 0 ? '?' : nameOf(script);
      file = url
        .replace(/^.*node_modules\/(\.pnpm\/[^/]+\/node_modules\/)?/, '')
        .replace(/^.*\/work\/[^/]+\/[^/]+\//, '');
      scriptOfFunction.set(shared, file);
    }
    return file;
  };

  // Two retainer steps: "array via Map.table via DataLoader._cacheMap" says whose Map it is.
  const via = (n: number, depth: number): string => {
    const parent = retainer[n]!;
    if (parent < 0 || depth === 0) return '';
    const parentName =
      typeOf(parent) === 'closure' ? `${nameOf(parent) || '(anonymous)'}()` : nameOf(parent) || typeOf(parent);
    return ` via ${short(parentName, 30)}.${short(retainerEdge[n] ?? '?', 24)}${via(parent, depth - 1).replace(' via', ' ←')}`;
  };
  const byKey = new Map<string, Aggregate>();
  let total = 0;
  for (let n = 0; n < count; n++) {
    const type = typeOf(n);
    const size = nodes[n * width + sizeAt]!;
    total += size;
    let key: string;
    if (type === 'string' || type === 'concatenated string' || type === 'sliced string' || type === 'number') {
      // By retainer too: "16 numbers per socket" says nothing, "Timeout._idleStart" does.
      key = `${type}${via(n, 2)}`;
    } else if (type === 'closure') {
      key = `closure ${nameOf(n) || '(anonymous)'} @ ${fileOf(n)}:${lineOf.get(n) ?? '?'}`;
    } else {
      key = `${type}:${short(nameOf(n))}${via(n, 2)}`;
    }
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
  const topRows = Number(args.get('rows') ?? TOP_ROWS);
  /** Keep the two snapshots in this directory (to open in DevTools) instead of deleting them. */
  const keep = args.get('keep');
  installExitHandlers();
  const dir = keep ?? mkdtempSync(join(tmpdir(), 'herald-heap-'));
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
        .slice(0, topRows)
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
    if (!keep) rmSync(dir, { recursive: true, force: true });
    await cleanupAll();
  }
}

main().catch(async (error: unknown) => {
  process.stderr.write(`heap-diff failed: ${(error as Error).stack ?? error}\n`);
  await cleanupAll();
  process.exit(1);
});
