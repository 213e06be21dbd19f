/**
 * The peer scenarios of `pnpm bench` and their table: Apollo Server 5 + graphql-ws, Mercurius 16
 * with and without its JIT, stock Yoga + graphql-ws (peer-server.ts), next to raw `ws` and Herald at the
 * same socket count, in the same run, with the same load clients, payload and selection.
 */
import type { FanoutResult, Ratios } from './fanout.js';
import { PEERS, type Peer } from './protocol.js';
import { startPeerTarget, type Target } from './targets.js';

const PEER_LABELS: Record<Peer, string> = {
  apollo: 'Apollo Server 5 + graphql-ws',
  mercurius: 'Mercurius 16 (JIT)',
  'mercurius-nojit': 'Mercurius 16 (no JIT)',
  yoga: 'stock Yoga 5 + graphql-ws',
};

/** One bench scenario per peer, keyed by scenario id (= the peer's name); they need neither PostgreSQL nor Redis. */
export function peerScenarios(): Record<
  Peer,
  { label: string; needs: never[]; start: (profileDir?: string) => Promise<Target> }
> {
  return Object.fromEntries(
    PEERS.map((peer) => [
      peer,
      {
        label: PEER_LABELS[peer],
        needs: [],
        start: (profileDir?: string) =>
          startPeerTarget(peer, profileDir).then((target) => Object.assign(target, { label: PEER_LABELS[peer] })),
      },
    ]),
  ) as ReturnType<typeof peerScenarios>;
}

const times = (value: number | null) => (value === null ? '–' : `${value.toFixed(2)}×`);
const num = (value: number, digits = 0) =>
  Number.isFinite(value)
    ? value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
    : '–';

/**
 * Herald against every server measured in the run, per socket count: each as × raw on deliveries/s, p99 of
 * one event → all sockets, and RSS per subscribed socket. Empty when no peer ran.
 */
export function peersMarkdown(fanout: Array<FanoutResult & { vsRaw: Ratios }>): string[] {
  if (!fanout.some((r) => (PEERS as readonly string[]).includes(r.id))) return [];
  const lines = [
    '## Herald and its peers, as × raw `ws` (same run, same client, payload and selection)',
    '',
    '| server | sockets | deliveries/s | × raw | one event → all sockets p99 ms | × raw | RSS/socket KB | × raw | wrong / missing / dup |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const sizes = [...new Set(fanout.map((r) => r.sockets))];
  for (const size of sizes) {
    const rows = fanout
      .filter((r) => r.sockets === size)
      .sort((a, b) => (b.saturation.deliveriesPerSec.median || 0) - (a.saturation.deliveriesPerSec.median || 0));
    for (const r of rows) {
      const c = r.correctness;
      lines.push(
        `| ${r.label} | ${r.subscribed} | ${num(r.saturation.deliveriesPerSec.median)} | ${r.id === 'raw' ? '1.00×' : times(r.vsRaw.deliveriesPerSec)} | ${num(r.single.p99Ms.median, 1)} | ${r.id === 'raw' ? '1.00×' : times(r.vsRaw.singleP99)} | ${num(r.rss.perSocketKB, 1)} | ${r.id === 'raw' ? '1.00×' : times(r.vsRaw.rssPerSocket)} | ${c.wrong} / ${c.missing} / ${c.duplicate} |`,
      );
    }
  }
  lines.push(
    '',
    'Sorted by deliveries/s at each socket count. Lower is better for p99 and RSS. The peers publish straight into their in-memory pub/sub (HTTP POST /publish, like raw); Herald publishes through `publishPost` (a PostgreSQL transaction and the outbox), which is in its CPU.',
    '',
  );
  return lines;
}
