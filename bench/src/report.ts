import { execFileSync } from 'node:child_process';
import { cpus, loadavg, release, totalmem } from 'node:os';
import { capacityMarkdown } from './capacity.js';
import { median, round } from './common.js';
import type { FanoutResult, Ratios } from './fanout.js';
import { type FootprintResult, footprintMarkdown } from './footprint.js';
import { type HttpResult, httpMarkdown } from './http.js';
import { peersMarkdown } from './peers.js';
import { type ResumeResult, resumeMarkdown } from './resume.js';
import { type TokenVerifyResult, tokenVerifyMarkdown } from './token-verify.js';
import { renderWebhookEngineNotes, renderWebhookEngineRows, type WebhookResult } from './webhooks.js';

export interface RunInfo {
  date: string;
  command: string;
  machine: string;
  node: string;
  commit: string;
  loadavgAtStart: number[];
  loadavgAtEnd: number[];
  durationSec: number;
  config: Record<string, unknown>;
  notes: string[];
}

export interface BenchResults {
  run: RunInfo;
  fanout: Array<FanoutResult & { vsRaw: Ratios }>;
  webhooks: WebhookResult | null;
  tokenVerify?: TokenVerifyResult | null;
  /** Resumable subscriptions' catch-up run; absent in results of earlier runs. */
  resume?: ResumeResult | null;
  /** The HTTP section (absent in runs from before it). */
  http?: HttpResult | null;
  /** The embedded footprint (absent in older runs). */
  footprint?: FootprintResult | null;
  skipped: string[];
}

export function machineDescription(): string {
  const cpu = cpus();
  return `${cpu.length} × ${cpu[0]?.model.trim() ?? 'unknown CPU'}, ${Math.round(totalmem() / 2 ** 30)} GiB RAM, Linux ${release()}`;
}

export function gitCommit(root: string): string {
  try {
    const sha = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
    const files = execFileSync('git', ['status', '--porcelain', '--', 'apps', 'packages'], {
      cwd: root,
      encoding: 'utf8',
    })
      .split('\n')
      .filter((line) => line.length > 3)
      .map((line) => line.slice(3));
    if (files.length === 0) return sha;
    return `${sha} + uncommitted changes in ${files.slice(0, 4).join(', ')}${files.length > 4 ? ` and ${files.length - 4} more` : ''}`;
  } catch {
    return 'unknown';
  }
}

export function currentLoadavg(): number[] {
  return loadavg().map((value) => round(value, 2));
}

const ratio = (value: number, base: number | undefined) =>
  base && Number.isFinite(value) && Number.isFinite(base) && base > 0 ? round(value / base, 3) : null;

/** Median of trial k over raw's trial k (they ran back to back): robust to background load that comes and goes. */
function pairedRatio(values: number[], base: number[] | undefined): number | null {
  if (!base || base.length === 0 || values.length !== base.length) return null;
  const ratios = values.map((value, k) => value / base[k]!).filter(Number.isFinite);
  return ratios.length ? round(median(ratios), 3) : null;
}

/** Below this growth of the raw server's RSS, its per-socket figure is noise (see withRatios). */
const MIN_RSS_DELTA_MIB = 16;

/** Each Herald result compared with the raw baseline at the same socket count, measured in the same run. */
export function withRatios(results: FanoutResult[]): Array<FanoutResult & { vsRaw: Ratios }> {
  return results.map((result) => {
    const raw = results.find((candidate) => candidate.id === 'raw' && candidate.sockets === result.sockets);
    const trials = result.saturation.trials;
    const rawTrials = raw?.saturation.trials;
    return {
      ...result,
      vsRaw: {
        deliveriesPerSec:
          pairedRatio(
            trials.map((t) => t.deliveriesPerSec),
            rawTrials?.map((t) => t.deliveriesPerSec),
          ) ?? ratio(result.saturation.deliveriesPerSec.median, raw?.saturation.deliveriesPerSec.median),
        serverCpuUsPerDelivery:
          pairedRatio(
            trials.map((t) => t.serverCpuUsPerDelivery),
            rawTrials?.map((t) => t.serverCpuUsPerDelivery),
          ) ?? ratio(result.saturation.serverCpuUsPerDelivery.median, raw?.saturation.serverCpuUsPerDelivery.median),
        // Raw's RSS grows by only a few MiB at 1k sockets, within the allocator's noise: no ratio from that.
        rssPerSocket:
          raw && raw.rss.loadedMiB - raw.rss.idleMiB >= MIN_RSS_DELTA_MIB
            ? ratio(result.rss.perSocketKB, raw.rss.perSocketKB)
            : null,
        singleP99: ratio(result.single.p99Ms.median, raw?.single.p99Ms.median),
        fixedP99: ratio(result.fixed.latency.p99Ms, raw?.fixed.latency.p99Ms),
      },
    };
  });
}

const fmt = (value: number | null | undefined, digits = 0) =>
  value === null || value === undefined || !Number.isFinite(value)
    ? '–'
    : value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const times = (value: number | null) => (value === null ? '–' : `${fmt(value, 2)}×`);
const kSockets = (n: number) => (n >= 1000 && n % 1000 === 0 ? `${n / 1000}k` : String(n));

/** The report's title names the run's scenarios: a run may hold HTTP or webhook results and no fan-out. */
function title(config: RunInfo['config']): string {
  const scenarios = Array.isArray(config.scenarios)
    ? config.scenarios.filter((id): id is string => typeof id === 'string')
    : [];
  return scenarios.length > 0 ? `# Herald benchmark: ${scenarios.join(', ')}` : '# Herald benchmark';
}

export function markdown(results: BenchResults): string {
  const { run } = results;
  const lines: string[] = [];
  lines.push(title(run.config), '');
  lines.push(`- Date: ${run.date}`);
  lines.push(`- Machine: ${run.machine}; Node ${run.node}`);
  lines.push(`- Herald commit: ${run.commit}`);
  lines.push(`- Command: \`${run.command}\` (total ${Math.round(run.durationSec)} s)`);
  lines.push(
    `- Load average (1/5/15 min) at start ${run.loadavgAtStart.join(' / ')}, at end ${run.loadavgAtEnd.join(' / ')} (the machine is shared: "other load" below is the CPU share used by processes outside the bench during the saturation trials)`,
  );
  lines.push('');
  lines.push('## Fan-out: one org, one selection `{ id title tags author { name } }`', '');
  lines.push(
    '| scenario | sockets | deliveries/s at saturation, median (min–max) | × raw | fixed rate: p50 / p99 / max ms | one event → all sockets: p50 / p99 / max ms (median of trials) | server CPU µs/delivery | × raw | RSS/socket KB | × raw | wrong / missing / dup | other load % |',
  );
  lines.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of results.fanout) {
    const s = r.saturation;
    const c = r.correctness;
    lines.push(
      `| ${r.label} | ${kSockets(r.subscribed)}${r.subscribed !== r.sockets ? ` of ${kSockets(r.sockets)}` : ''} | ${fmt(s.deliveriesPerSec.median)} (${fmt(s.deliveriesPerSec.min)}–${fmt(s.deliveriesPerSec.max)}) | ${times(r.vsRaw.deliveriesPerSec)} | ${fmt(r.fixed.latency.p50Ms, 1)} / ${fmt(r.fixed.latency.p99Ms, 1)} / ${fmt(r.fixed.latency.maxMs, 1)} | ${fmt(r.single.p50Ms.median, 1)} / ${fmt(r.single.p99Ms.median, 1)} / ${fmt(r.single.maxMs.median, 1)} | ${fmt(s.serverCpuUsPerDelivery.median, 1)} | ${times(r.vsRaw.serverCpuUsPerDelivery)} | ${fmt(r.rss.perSocketKB, 1)} | ${times(r.vsRaw.rssPerSocket)} | ${c.wrong} / ${c.missing} / ${c.duplicate} | ${fmt(s.otherLoadPct.median, 0)} |`,
    );
  }
  lines.push('');
  lines.push(
    `RSS per socket is (RSS loaded − RSS idle) ÷ sockets after a forced GC; at 1k sockets that difference is a few MiB and moves by ±4 KB/socket between runs, so the ratio to raw is only given where raw's RSS grew by ${MIN_RSS_DELTA_MIB} MiB or more (10k sockets). CPU µs per delivery is the figure least disturbed by other load on the machine.`,
    '',
  );
  lines.push(...peersMarkdown(results.fanout));
  lines.push(...capacityMarkdown(results.fanout));
  lines.push('Details per scenario:', '');
  lines.push(
    '| scenario | sockets | connect s | fixed rate events/s | saturation window (events in flight) | trials: deliveries/s | one event per trial: first frame / p99 ms | client CPU µs/delivery | publish CPU µs/event (no sockets) | server CPU µs/delivery minus publish | RSS idle → loaded MiB | heap/socket KB | frames checked | not byte-identical but right |',
  );
  lines.push('|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of results.fanout) {
    lines.push(
      `| ${r.label} | ${kSockets(r.subscribed)} | ${fmt(r.connect.ms / 1000, 1)} | ${fmt(r.fixed.eventsPerSec, 1)} | ${r.saturation.window} | ${r.saturation.trials.map((t) => fmt(t.deliveriesPerSec)).join(', ')} | ${r.single.trials.map((t) => (t.minMs === undefined ? '' : `${fmt(t.minMs, 1)} / `) + fmt(t.p99Ms, 1)).join(', ')} | ${fmt(r.saturation.clientCpuUsPerDelivery.median, 1)} | ${fmt(r.publishCpuUsPerEvent)} | ${fmt(r.saturation.serverCpuUsPerDelivery.median - r.publishCpuUsPerEvent / r.subscribed, 1)} | ${fmt(r.rss.idleMiB, 0)} → ${fmt(r.rss.loadedMiB, 0)} | ${fmt(r.rss.heapPerSocketKB, 1)} | ${fmt(r.correctness.valid)} | ${fmt(r.correctness.noncanonical)} |`,
    );
  }
  const problems = results.fanout.filter(
    (r) =>
      r.correctness.wrong + r.correctness.missing + r.correctness.duplicate + r.correctness.publishErrors > 0 ||
      r.connect.failed > 0 ||
      r.correctness.socketsClosed > 0,
  );
  if (problems.length) {
    lines.push('', '**Problems seen:**', '');
    for (const r of problems) {
      const c = r.correctness;
      lines.push(
        `- ${r.label} @ ${kSockets(r.sockets)}: ${c.wrong} wrong, ${c.missing} missing, ${c.duplicate} duplicate, ${c.publishErrors} publish errors, ${r.connect.failed} sockets failed to connect, ${c.socketsClosed} closed by the server. ${[...r.connect.errors, ...c.samples].slice(0, 3).join(' | ')}`,
      );
    }
  }
  const serverNotes = [...new Set(results.fanout.flatMap((r) => r.notes.map((note) => `${r.label}: ${note}`)))];
  lines.push('', 'Setups:', '');
  for (const note of serverNotes) lines.push(`- ${note}`);

  lines.push('', '## Webhooks: signed deliveries/s to a local receiver that answers 200 at once', '');
  const w = results.webhooks;
  if (!w) {
    lines.push('Not run.');
  } else {
    const d = w.dispatcher;
    lines.push('| sender | deliveries/s | × raw loop | notes |', '|---|---:|---:|---|');
    lines.push(
      `| raw undici POST loop (${w.rawLoop.connections} keep-alive connections, pre-signed body) | ${fmt(w.rawLoop.deliveriesPerSec.median)} (${fmt(w.rawLoop.deliveriesPerSec.min)}–${fmt(w.rawLoop.deliveriesPerSec.max)}) | 1.00× | p99 ${w.rawLoop.trials.map((t) => fmt(t.p99Ms, 1)).join(', ')} ms |`,
    );
    lines.push(...renderWebhookEngineRows(w));
    if (d.status === 'ok' || d.status === 'incomplete') {
      lines.push(
        `| webhook dispatcher (apps/webhook-dispatcher, 1 process) | ${fmt(d.deliveriesPerSec)} | ${times(w.ratio)} | ${d.status}: ${fmt(d.verified)}/${fmt(d.events)} events verified (signature + dedupe), ${d.invalid} invalid, ${d.duplicate} duplicate; ${fmt(d.endToEndPerSec)}/s from "ready"; ${fmt(d.cpuUsPerDelivery)} µs CPU/delivery${d.reason ? `; ${d.reason}` : ''} |`,
      );
    } else {
      lines.push(`| webhook dispatcher | **${d.status}** | – | ${d.reason ?? ''} |`);
    }
    lines.push(...renderWebhookEngineNotes(w));
    lines.push('', `Receiver: ${w.receiver}.`);
    lines.push(
      '',
      w.dispatchers === 'image'
        ? "Dispatchers: the production build (`pnpm build:prod webhook-dispatcher`), started with its container image's node flags."
        : 'Dispatchers: the TypeScript sources under tsx.',
    );
  }
  lines.push(...tokenVerifyMarkdown(results.tokenVerify));
  if (results.resume) lines.push('', resumeMarkdown(results.resume));
  if (results.http) lines.push('', httpMarkdown(results.http));
  if (results.footprint) lines.push('', footprintMarkdown(results.footprint));
  if (results.skipped.length) {
    lines.push('', '## Skipped', '');
    for (const skipped of results.skipped) lines.push(`- ${skipped}`);
  }
  lines.push('', '## How it measures', '');
  for (const note of run.notes) lines.push(`- ${note}`);
  lines.push('', `Configuration: \`${JSON.stringify(run.config)}\``, '');
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------------------
// Chart (hand-written SVG)

const COLORS: Record<string, string> = {
  raw: '#6b7280',
  embedded: '#2563eb',
  redis: '#16a34a',
  'embedded-stock': '#93c5fd',
  'redis-stock': '#86efac',
};

const escapeXml = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

interface Bar {
  id: string;
  value: number;
  low?: number;
  high?: number;
}

interface Scale {
  y(value: number): number;
  ticks: number[];
}

function linearScale(max: number, top: number, bottom: number): Scale {
  const raw = max / 4;
  const magnitude = 10 ** Math.floor(Math.log10(raw || 1));
  const step = ([1, 2, 2.5, 5, 10].find((m) => m * magnitude >= raw) ?? 10) * magnitude;
  const ceiling = step * Math.ceil((max * 1.08) / step);
  const ticks = Array.from({ length: Math.round(ceiling / step) + 1 }, (_, i) => i * step);
  return { y: (value) => bottom - (value / ceiling) * (bottom - top), ticks };
}

function logScale(min: number, max: number, top: number, bottom: number): Scale {
  const lo = 10 ** Math.floor(Math.log10(Math.max(0.1, min)));
  const hi = 10 ** Math.ceil(Math.log10(Math.max(lo * 10, max * 1.2)));
  const ticks: number[] = [];
  for (let t = lo; t <= hi * 1.0001; t *= 10) ticks.push(t);
  const span = Math.log10(hi) - Math.log10(lo);
  return {
    y: (value) => bottom - ((Math.log10(Math.max(lo, value)) - Math.log10(lo)) / span) * (bottom - top),
    ticks,
  };
}

function panel(
  x0: number,
  title: string,
  subtitle: string,
  groups: Array<{ label: string; bars: Bar[] }>,
  width: number,
  height: number,
  log: boolean,
): string {
  const top = 56;
  const bottom = height - 40;
  const left = x0 + 56;
  const right = x0 + width - 16;
  const values = groups
    .flatMap((g) => g.bars.flatMap((b) => [b.value, b.high ?? b.value, b.low ?? b.value]))
    .filter((value) => Number.isFinite(value) && value > 0);
  const max = Math.max(1, ...values);
  const scale = log ? logScale(Math.min(...values, max), max, top, bottom) : linearScale(max, top, bottom);
  const out: string[] = [];
  out.push(
    `<text x="${x0 + width / 2}" y="20" text-anchor="middle" font-size="14" font-weight="600">${escapeXml(title)}</text>`,
  );
  out.push(
    `<text x="${x0 + width / 2}" y="37" text-anchor="middle" font-size="11" fill="#4b5563">${escapeXml(subtitle)}</text>`,
  );
  for (const tick of scale.ticks) {
    const y = scale.y(tick);
    out.push(`<line x1="${left}" x2="${right}" y1="${y}" y2="${y}" stroke="#e5e7eb"/>`);
    out.push(
      `<text x="${left - 6}" y="${y + 4}" text-anchor="end" font-size="11" fill="#374151">${escapeXml(compact(tick))}</text>`,
    );
  }
  const groupWidth = (right - left) / Math.max(1, groups.length);
  groups.forEach((group, g) => {
    const gx = left + g * groupWidth;
    const barWidth = Math.min(44, (groupWidth - 16) / Math.max(1, group.bars.length));
    const start = gx + (groupWidth - barWidth * group.bars.length) / 2;
    group.bars.forEach((bar, b) => {
      if (!Number.isFinite(bar.value)) return;
      const bx = start + b * barWidth;
      const y = scale.y(bar.value);
      out.push(
        `<rect x="${bx + 2}" y="${y}" width="${barWidth - 4}" height="${Math.max(0, bottom - y)}" fill="${COLORS[bar.id] ?? '#a855f7'}"><title>${escapeXml(`${bar.id}: ${bar.value}`)}</title></rect>`,
      );
      if (bar.low !== undefined && bar.high !== undefined && bar.high > bar.low) {
        const cx = bx + barWidth / 2;
        const [hy, ly] = [scale.y(bar.high), scale.y(bar.low)];
        out.push(
          `<path d="M${cx} ${hy}V${ly}M${cx - 4} ${hy}H${cx + 4}M${cx - 4} ${ly}H${cx + 4}" stroke="#111827" stroke-width="1.2"/>`,
        );
      }
      out.push(
        `<text x="${bx + barWidth / 2}" y="${Math.min(y, bar.high !== undefined ? scale.y(bar.high) : y) - 4}" text-anchor="middle" font-size="10" fill="#111827">${escapeXml(compact(bar.value))}</text>`,
      );
    });
    out.push(
      `<text x="${gx + groupWidth / 2}" y="${bottom + 18}" text-anchor="middle" font-size="12">${escapeXml(group.label)}</text>`,
    );
  });
  out.push(`<line x1="${left}" x2="${right}" y1="${bottom}" y2="${bottom}" stroke="#111827"/>`);
  return out.join('\n');
}

function compact(value: number): string {
  if (!Number.isFinite(value)) return '–';
  if (value >= 10_000) return `${round(value / 1000, 0)}k`;
  if (value >= 1000) return `${round(value / 1000, 1)}k`;
  if (value >= 100) return String(Math.round(value));
  if (value >= 1) return String(round(value, 1));
  return String(round(value, 2));
}

export function chart(results: BenchResults): string {
  const sizes = [...new Set(results.fanout.map((r) => r.sockets))].sort((a, b) => a - b);
  const ids = [...new Set(results.fanout.map((r) => r.id))];
  const labelOf = new Map(results.fanout.map((r) => [r.id, r.label]));
  const groups = (pick: (r: FanoutResult) => Bar) =>
    sizes.map((size) => ({
      label: `${kSockets(size)} sockets`,
      bars: ids
        .map((id) => results.fanout.find((r) => r.id === id && r.sockets === size))
        .filter((r): r is FanoutResult & { vsRaw: Ratios } => r !== undefined)
        .map(pick),
    }));
  const width = 420;
  const height = 360;
  const fixedRate = results.run.config.fixedDeliveriesPerSec;
  const panels = [
    panel(
      0,
      'Deliveries/s at saturation',
      'median of the trials, whiskers min–max',
      groups((r) => ({
        id: r.id,
        value: r.saturation.deliveriesPerSec.median,
        low: r.saturation.deliveriesPerSec.min,
        high: r.saturation.deliveriesPerSec.max,
      })),
      width,
      height,
      false,
    ),
    panel(
      width,
      'p99 ms, one event → all sockets',
      'log scale; median of the trials, whiskers min–max',
      groups((r) => ({ id: r.id, value: r.single.p99Ms.median, low: r.single.p99Ms.min, high: r.single.p99Ms.max })),
      width,
      height,
      true,
    ),
    panel(
      width * 2,
      'p99 ms at a fixed moderate rate',
      `log scale; ${typeof fixedRate === 'number' ? `${fixedRate.toLocaleString('en-US')} deliveries/s` : 'fixed rate'}`,
      groups((r) => ({ id: r.id, value: r.fixed.latency.p99Ms })),
      width,
      height,
      true,
    ),
  ];
  let x = 20;
  let row = 0;
  const legendItems: string[] = [];
  for (const id of ids) {
    const label = labelOf.get(id) ?? id;
    const itemWidth = 30 + label.length * 6.6;
    if (x + itemWidth > width * 3 - 10) {
      x = 20;
      row++;
    }
    const y = height + 4 + row * 20;
    legendItems.push(
      `<rect x="${x}" y="${y}" width="14" height="14" fill="${COLORS[id] ?? '#a855f7'}"/><text x="${x + 20}" y="${y + 12}" font-size="12">${escapeXml(label)}</text>`,
    );
    x += itemWidth;
  }
  const footerY = height + 4 + (row + 1) * 20 + 14;
  const footer = `<text x="20" y="${footerY}" font-size="11" fill="#374151">${escapeXml(`${results.run.date} · ${results.run.machine} · Node ${results.run.node} · Herald ${results.run.commit}`)}</text>`;
  const total = footerY + 12;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width * 3}" height="${total}" viewBox="0 0 ${width * 3} ${total}" font-family="system-ui, sans-serif">
<rect width="100%" height="100%" fill="#ffffff"/>
${panels.join('\n')}
${legendItems.join('\n')}
${footer}
</svg>
`;
}
