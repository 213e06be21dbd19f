import { round } from './common.js';

/** The parts of a V8 `.cpuprofile` (node --cpu-prof) this summary reads. */
export interface CpuProfile {
  nodes: Array<{
    id: number;
    callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  }>;
  /** Microseconds, on the monotonic clock (the same one as `process.hrtime`). */
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileRow {
  name: string;
  ms: number;
  /** Share of the non-idle time in the window. */
  pct: number;
}

export interface ProfileSummary {
  windowMs: number;
  busyMs: number;
  idleMs: number;
  samples: number;
  byCategory: ProfileRow[];
  byPackage: ProfileRow[];
  topFunctions: ProfileRow[];
}

const PUBSUB_PACKAGES = [
  '@repeaterjs/repeater',
  '@graphql-yoga/subscription',
  '@graphql-yoga/typed-event-target',
  '@graphql-yoga/redis-event-target',
  '@whatwg-node/events',
  'ioredis',
  'redis-parser',
];

/** The node_modules package a script URL belongs to (the last `node_modules/` segment: pnpm nests them). */
export function packageOf(url: string): string | undefined {
  const index = url.lastIndexOf('/node_modules/');
  if (index < 0) return undefined;
  const rest = url.slice(index + '/node_modules/'.length).split('/');
  return rest[0]?.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0];
}

/** A coarse area of the server a function belongs to (fan-out, GraphQL, ws, JSON, GC, …), for the profile summary. */
export function categorise(functionName: string, url: string): string {
  if (functionName === '(garbage collector)') return 'garbage collection';
  if (functionName === '(idle)') return 'idle';
  if (functionName === '(program)') return 'V8/native, unattributed ((program))';
  const pkg = packageOf(url);
  if (pkg === 'ws') return 'socket send/receive: ws';
  if (pkg === 'graphql')
    return url.includes('/execution/') ? 'GraphQL execute (graphql-js)' : 'GraphQL other (graphql-js)';
  if (pkg === 'graphql-ws') return 'graphql-ws server';
  if (pkg && PUBSUB_PACKAGES.includes(pkg)) return 'pub/sub and async iterators (Yoga pubsub, repeater, Redis)';
  if (
    pkg &&
    (pkg.startsWith('@envelop/') ||
      pkg === 'graphql-yoga' ||
      pkg.startsWith('@graphql-yoga/') ||
      pkg.startsWith('@graphql-tools/') ||
      pkg.startsWith('@whatwg-node/'))
  )
    return 'Yoga / envelop / graphql-tools';
  if (pkg?.startsWith('@pothos/')) return 'Pothos field wrappers';
  if (pkg === 'pino' || pkg === 'prom-client' || pkg === 'sonic-boom' || pkg === 'thread-stream')
    return 'logging and metrics';
  if (
    pkg === 'pg' ||
    pkg === 'pg-protocol' ||
    pkg === 'kysely' ||
    pkg === 'pg-pool' ||
    pkg?.startsWith('@electric-sql/')
  )
    return 'database';
  if (pkg === 'dataloader') return 'dataloader';
  if (pkg === 'tsx' || pkg === 'esbuild') return 'tsx loader';
  if (pkg) return `other packages (${pkg})`;
  if (url.includes('/apps/') || url.includes('/packages/')) return 'Herald code (apps/, packages/)';
  if (url.includes('/bench/')) return 'raw server code (bench/)';
  if (url.startsWith('node:')) {
    if (
      /node:(internal\/)?(net|stream|streams\/|stream_base_commons|internal\/streams)/.test(url) ||
      url.includes('stream')
    )
      return 'socket send/receive: Node net and streams';
    if (url.includes('task_queues') || url.includes('async_hooks') || url.includes('promise'))
      return 'promises / microtask queue (Node)';
    if (url.includes('timers')) return 'timers';
    if (url.includes('http')) return 'HTTP server (Node)';
    if (url.includes('buffer')) return 'Buffer';
    return 'Node internals, other';
  }
  if (url === '') {
    if (functionName === 'stringify' || functionName === 'parse') return 'JSON (native)';
    if (
      /^(writev|writeBuffer|writeString|writeUtf8String|writeLatin1String|writeAsciiString|readv|read)$/.test(
        functionName,
      )
    )
      return 'socket writes: native write/writev (syscall, incl. loopback TCP)';
    if (/Promise|await|Async|then|resolve|next|microtask/i.test(functionName))
      return 'promises / async functions (V8 builtins)';
    return 'native/builtins, other';
  }
  return 'other';
}

/**
 * Self time per category, package and function, from the samples that fall inside `windowsUs`
 * (monotonic µs; the whole profile without it). A sample lasts until the next one.
 */
export function summariseProfile(profile: CpuProfile, windowsUs?: Array<[number, number]>): ProfileSummary {
  const byId = new Map(profile.nodes.map((node) => [node.id, node.callFrame]));
  const category = new Map<string, number>();
  const pkg = new Map<string, number>();
  const fn = new Map<string, number>();
  let t = profile.startTime;
  let idleUs = 0;
  let busyUs = 0;
  let samples = 0;
  const add = (map: Map<string, number>, key: string, us: number) => map.set(key, (map.get(key) ?? 0) + us);
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i] ?? 0;
    const next = i + 1 < profile.samples.length ? t + (profile.timeDeltas[i + 1] ?? 0) : profile.endTime;
    const duration = Math.max(0, next - t);
    if (windowsUs && !windowsUs.some(([start, end]) => t >= start && t <= end)) continue;
    const frame = byId.get(profile.samples[i]!);
    if (!frame) continue;
    samples++;
    const cat = categorise(frame.functionName, frame.url);
    if (cat === 'idle') {
      idleUs += duration;
      continue;
    }
    busyUs += duration;
    add(category, cat, duration);
    add(pkg, packageOf(frame.url) ?? ownArea(frame.url), duration);
    // Herald's TypeScript runs transpiled by tsx: its line numbers are not the source's, so they're left out.
    const location = frame.url
      ? `${shortUrl(frame.url)}${frame.url.endsWith('.ts') ? '' : `:${frame.lineNumber + 1}`}`
      : '';
    add(fn, `${frame.functionName || '(anonymous)'}${location ? ` — ${location}` : ''}`, duration);
  }
  const rows = (map: Map<string, number>, limit: number): ProfileRow[] =>
    [...map.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, limit)
      .map(([name, us]) => ({ name, ms: round(us / 1000, 1), pct: round((us / Math.max(1, busyUs)) * 100, 1) }));
  return {
    windowMs: round(
      (windowsUs
        ? windowsUs.reduce((sum, [start, end]) => sum + end - start, 0)
        : profile.endTime - profile.startTime) / 1000,
      0,
    ),
    busyMs: round(busyUs / 1000, 0),
    idleMs: round(idleUs / 1000, 0),
    samples,
    byCategory: rows(category, 30),
    byPackage: rows(pkg, 20),
    topFunctions: rows(fn, 30),
  };
}

/** Where a script outside node_modules belongs. */
function ownArea(url: string): string {
  if (url.startsWith('node:')) return 'node: (core)';
  if (url === '') return '(native)';
  if (url.includes('/bench/')) return 'bench (raw server)';
  return 'herald (apps/, packages/)';
}

function shortUrl(url: string): string {
  const pkg = packageOf(url);
  if (pkg) return `${pkg}/${url.slice(url.lastIndexOf(`/node_modules/${pkg}/`) + `/node_modules/${pkg}/`.length)}`;
  const apps = url.search(/\/(apps|packages|bench)\//);
  if (apps >= 0) return url.slice(apps + 1);
  return url;
}

export function profileMarkdown(title: string, context: string[], summary: ProfileSummary): string {
  const table = (rows: ProfileRow[], head: string) =>
    [
      `| ${head} | self ms | % of busy |`,
      '|---|---:|---:|',
      ...rows.map((r) => `| ${r.name.replace(/\|/g, '\\|')} | ${r.ms} | ${r.pct} |`),
    ].join('\n');
  return [
    `## ${title}`,
    '',
    ...context.map((line) => `- ${line}`),
    `- Window: ${summary.windowMs} ms of saturation trials; ${summary.samples} samples; busy ${summary.busyMs} ms (${round((summary.busyMs / Math.max(1, summary.windowMs)) * 100, 0)}% of one core), idle ${summary.idleMs} ms`,
    '',
    '### Self time by area',
    '',
    table(summary.byCategory, 'area'),
    '',
    '### Self time by package',
    '',
    table(summary.byPackage, 'package'),
    '',
    '### Top functions by self time',
    '',
    table(summary.topFunctions, 'function — location'),
    '',
  ].join('\n');
}

/**
 * One table across profiles: each area's share of busy time and what that costs per delivery
 * (share × the run's server CPU µs per delivery), so runs of different speeds compare directly.
 */
export function glanceMarkdown(
  entries: Array<{ title: string; summary: ProfileSummary; cpuUsPerDelivery: number }>,
): string {
  const areas = new Map<string, number>();
  for (const { summary, cpuUsPerDelivery } of entries) {
    for (const row of summary.byCategory) {
      areas.set(row.name, Math.max(areas.get(row.name) ?? 0, (row.pct * cpuUsPerDelivery) / 100));
    }
  }
  const ordered = [...areas.entries()].sort((a, b) => b[1] - a[1]).map(([name]) => name);
  const shown = ordered.slice(0, 14);
  const cell = (summary: ProfileSummary, cpu: number, area: string) => {
    const row = summary.byCategory.find((candidate) => candidate.name === area);
    return row ? `${round((row.pct * cpu) / 100, 1)} µs (${row.pct}%)` : '–';
  };
  const rest = (summary: ProfileSummary, cpu: number) => {
    const pct = summary.byCategory.filter((row) => !shown.includes(row.name)).reduce((sum, row) => sum + row.pct, 0);
    return `${round((pct * cpu) / 100, 1)} µs (${round(pct, 1)}%)`;
  };
  return [
    '## At a glance: server CPU per delivery, by area',
    '',
    `| area | ${entries.map((entry) => entry.title).join(' | ')} |`,
    `|---|${entries.map(() => '---:').join('|')}|`,
    `| **total server CPU per delivery** | ${entries.map((entry) => `**${entry.cpuUsPerDelivery} µs**`).join(' | ')} |`,
    ...shown.map(
      (area) =>
        `| ${area} | ${entries.map((entry) => cell(entry.summary, entry.cpuUsPerDelivery, area)).join(' | ')} |`,
    ),
    `| everything else | ${entries.map((entry) => rest(entry.summary, entry.cpuUsPerDelivery)).join(' | ')} |`,
    '',
    "µs = the area's share of the profiled busy time × the server CPU µs per delivery measured in the same run (with the profiler on).",
    '',
  ].join('\n');
}
