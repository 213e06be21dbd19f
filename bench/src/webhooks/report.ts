/**
 * The webhook scenario's lines in results.md: the engine's table rows and the notes under the table.
 */
import { round, spread } from '../common.js';
import {
  type BesideRatio,
  type DispatcherRun,
  type MachineShare,
  type Percentiles,
  type RawLoopTrial,
  type SteadyLatency,
  type SteadyStages,
  WARM_FRACTION,
  type WebhookResult,
} from './results.js';

/** The raw durable loop's trials: the whole machine's CPU per delivery and how busy its cores were (medians). */
export function machineText(trials: readonly RawLoopTrial[]): string {
  const shares = trials.flatMap((trial) => (trial.machine ? [trial.machine] : []));
  if (shares.length === 0) return 'machine CPU not measured';
  const us = spread(shares.map((one) => one.usPerDelivery)).median;
  const busy = spread(shares.map((one) => one.busyShare)).median;
  return `whole machine ${num(us)} µs CPU per delivery, cores ${num(busy * 100)} % busy`;
}

/** The raw durable loop's trials: what the receiver verified of what the loop sent, all trials together. */
export function verifiedText(trials: readonly RawLoopTrial[]): string {
  if (trials.some((trial) => trial.verified === undefined)) return 'not verified at the receiver';
  const sent = trials.reduce((sum, trial) => sum + trial.requests, 0);
  const verified = trials.reduce((sum, trial) => sum + (trial.verified ?? 0), 0);
  const invalid = trials.reduce((sum, trial) => sum + (trial.invalid ?? 0), 0);
  return `receiver verified ${num(verified)} of ${num(sent)} answered (${num(invalid)} invalid or duplicate)`;
}

/** "whole machine …" for a dispatcher run (or its warm window). */
export function machineRunText(machine: MachineShare | undefined): string {
  return machine
    ? `whole machine ${num(machine.usPerDelivery)} µs CPU per delivery (every process), cores ${num(machine.busyShare * 100)} % busy`
    : 'whole machine not measured';
}

/** "past start-up: …" for a backlog run with a warm window. */
export function warmText(run: DispatcherRun | null | undefined): string {
  const w = run?.warm;
  if (!w) return 'past start-up: not measured';
  return `past start-up (the last ${num(w.deliveries)} deliveries, after the first ${Math.round(WARM_FRACTION * 100)} % of the backlog): ${num(w.deliveriesPerSec)}/s, ${num(w.cpuUsPerDelivery)} µs dispatcher CPU, ${num(w.pgCpuUsPerDelivery)} µs PostgreSQL CPU, ${num(w.queriesPerDelivery, 3)} round trips per delivery, ${machineRunText(w.machine)}`;
}

/** One line: each stage's p50 / p99, and how busy the endpoint's slots were. */
export function stagesLine(stages: SteadyStages): string {
  const one = (label: string, value: Percentiles) => `${label} ${round(value.p50Ms, 1)} / ${round(value.p99Ms, 1)}`;
  return `stages, p50 / p99 ms per delivery: ${[
    one('commit → fan-out', stages.commitToFanOut),
    one('fan-out → POST began (stream, lane wait, claim)', stages.fanOutToPost),
    one('POST', stages.post),
    one('POST began → receiver', stages.postToReceiver),
    one('answer → record began', stages.answerToRecord),
  ].join('; ')}; the endpoint's slots had a POST in flight ${round(stages.slotBusyShare * 100, 0)} % of the time`;
}

export const num = (value: number | null | undefined, digits = 0) =>
  value === null || value === undefined || Number.isNaN(value)
    ? '–'
    : value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** Table rows of the engine's part (raw durable loop, two dispatchers), for report.ts's webhook table. */
export function renderWebhookEngineRows(w: WebhookResult): string[] {
  const rows: string[] = [];
  if (w.durableLoop) {
    const d = w.durableLoop.deliveriesPerSec;
    rows.push(
      `| raw durable loop (${w.durableLoop.connections} connections; signs each body, records outcomes in INSERTs of 100) | ${num(d.median)} (${num(d.min)}–${num(d.max)}) | ${num(d.median / w.rawLoop.deliveriesPerSec.median, 2)}× | p99 ${w.durableLoop.trials.map((t) => num(t.p99Ms, 1)).join(', ')} ms; ${machineText(w.durableLoop.trials)}; ${verifiedText(w.durableLoop.trials)} |`,
    );
  }
  const warm = w.warmDispatcher;
  if (warm && (warm.status === 'ok' || warm.status === 'incomplete')) {
    rows.push(
      `| webhook dispatcher, 1 warm process (${num(w.warmUpEvents)} events delivered first) | ${num(warm.deliveriesPerSec)} | ${num((warm.deliveriesPerSec ?? 0) / w.rawLoop.deliveriesPerSec.median, 2)}× | ${warm.status}: ${num(warm.verified)}/${num(warm.events)} verified, ${warm.invalid} invalid, ${warm.duplicate} duplicate; ${num(warm.cpuUsPerDelivery)} µs CPU/delivery |`,
    );
  }
  const two = w.twoDispatchers;
  if (two && (two.status === 'ok' || two.status === 'incomplete')) {
    rows.push(
      `| webhook dispatcher, 2 processes | ${num(two.deliveriesPerSec)} | ${num((two.deliveriesPerSec ?? 0) / w.rawLoop.deliveriesPerSec.median, 2)}× | ${two.status}: ${num(two.verified)}/${num(two.events)} verified, ${two.invalid} invalid, ${two.duplicate} duplicate, ${num((two.events ?? 0) - (two.verified ?? 0))} not delivered when the run stopped; ${num(two.cpuUsPerDelivery)} µs CPU/delivery (both) |`,
    );
  } else if (two) {
    rows.push(`| webhook dispatcher, 2 processes | **${two.status}** | – | ${two.reason ?? ''} |`);
  }
  return rows;
}

/** ", 0.52× its trials just before and after (9,100 and 9,900/s)", or nothing. */
export function besideText(beside: BesideRatio | null | undefined): string {
  if (!beside) return '';
  return ` (median of its trials), ${num(beside.ratio, 2)}× its trials just before and after the run (${num(beside.trials[0])} and ${num(beside.trials[1])}/s)`;
}

/**
 * The steady trial's publisher: how late its calls started and how long each took to answer. It fell short
 * when it published under 95 % of the rate asked or some calls failed: then the dispatcher saw fewer
 * events per second than asked, and the latency is the publisher's queueing as much as the dispatcher's.
 */
export function publisherLine(l: SteadyLatency): string | null {
  if (!l.publisher) return null;
  const { late, call } = l.publisher;
  const short = l.publishedPerSec < 0.95 * l.eventsPerSec || l.publishFailed > 0;
  return `the publisher: each call started p50 ${num(late.p50Ms, 1)} / p99 ${num(late.p99Ms, 1)} ms after its scheduled time; publishPost answered p50 ${num(call.p50Ms, 1)} / p99 ${num(call.p99Ms, 1)} / max ${num(call.maxMs, 1)} ms after its call (waiting for a pooled connection, the statement, the commit); ${short ? `it fell short of the rate asked (${num(l.publishedPerSec)} of ${num(l.eventsPerSec)}/s, ${num(l.publishFailed)} calls failed): publisher-bound` : 'it kept the rate asked'}`;
}

/**
 * "- one dispatcher from a new process, 3 runs: …": each figure of every run (the first is the one above),
 * then their median; null with a single run.
 */
export function newProcessRunsLine(w: WebhookResult): string | null {
  const repeats = w.newProcessRepeats ?? [];
  if (repeats.length === 0) return null;
  const runs = [w.dispatcher, ...repeats.map((repeat) => repeat.run)];
  const durable = w.durableLoop?.deliveriesPerSec.median;
  const each = (values: Array<number | undefined>, digits = 0, unit = '') => {
    const measured = values.filter((value): value is number => value !== undefined && Number.isFinite(value));
    const median = measured.length > 0 ? spread(measured).median : undefined;
    return `${values.map((value) => num(value, digits)).join(' / ')}${unit} (median ${num(median, digits)}${unit})`;
  };
  const rates = runs.map((run) => run.deliveriesPerSec);
  return `- one dispatcher from a new process, ${runs.length} runs (each its own process, the same backlog; the first is the run above): ${each(rates)} deliveries/s; ${each(
    rates.map((rate) => (rate !== undefined && durable ? rate / durable : undefined)),
    2,
    '×',
  )} the raw durable loop's median; ${each([w.beside?.dispatcher?.ratio, ...repeats.map((repeat) => repeat.beside?.ratio)], 2, '×')} its trials just before and after each run; per delivery ${each(
    runs.map((run) => run.cpuUsPerDelivery),
    0,
    ' µs',
  )} dispatcher CPU, ${each(
    runs.map((run) => run.pgCpuUsPerDelivery),
    0,
    ' µs',
  )} PostgreSQL CPU, whole machine ${each(
    runs.map((run) => run.machine?.usPerDelivery),
    0,
    ' µs',
  )}; ${runs.filter((run) => run.status === 'ok').length} of ${runs.length} ok (every event verified once)`;
}

/** Lines under the webhook table: the engine ratios (one and two dispatchers against the raw durable loop) and the scheduler pass. */
export function renderWebhookEngineNotes(w: WebhookResult): string[] {
  const d = w.dispatcher;
  const lines = [''];
  lines.push(
    `- one dispatcher: ${num(d.deliveriesPerSec)} deliveries/s = ${num(w.durableRatio, 2)}× the raw durable loop${besideText(w.beside?.dispatcher)} (target ≥ 5,000/s and ≥ 0.6×); not delivered when the run stopped (lost unless the run timed out) ${num((d.events ?? 0) - (d.verified ?? 0))}, duplicates ${num(d.duplicate)}`,
  );
  lines.push(
    `- one dispatcher (WEBHOOK_ENDPOINT_CONCURRENCY=${num(d.endpointCap)}): ${num(d.cpuUsPerDelivery)} µs dispatcher CPU and ${num(d.pgCpuUsPerDelivery)} µs PostgreSQL backend CPU per delivery (the backends serving its connections, by application_name; WAL writer and checkpointer not included); ${num(d.queriesPerDelivery, 3)} PostgreSQL round trips per delivery (every query its pg clients sent, BEGIN/COMMIT included); ${machineRunText(d.machine)}`,
  );
  lines.push(
    `- one dispatcher ${warmText(d)} = ${num(w.warmDurableRatio, 2)}× the raw durable loop (whose trials are warm too)`,
  );
  const runs = newProcessRunsLine(w);
  if (runs) lines.push(runs);
  const warm = w.warmDispatcher;
  if (warm) {
    lines.push(
      warm.status === 'ok' || warm.status === 'incomplete'
        ? `- one warm dispatcher (it first delivered ${num(w.warmUpEvents)} events, then was stopped with SIGSTOP while the backlog was published, and continued): ${num(warm.deliveriesPerSec)} deliveries/s = ${num(w.warmDispatcherDurableRatio, 2)}× the raw durable loop${besideText(w.beside?.warm)}; ${warm.status}: ${num(warm.verified)}/${num(warm.events)} verified, ${num(warm.duplicate)} duplicate; ${num(warm.cpuUsPerDelivery)} µs dispatcher CPU, ${num(warm.pgCpuUsPerDelivery)} µs PostgreSQL CPU, ${num(warm.queriesPerDelivery, 3)} round trips per delivery; ${machineRunText(warm.machine)}; its ${warmText(warm)}`
        : `- one warm dispatcher: ${warm.status} ${warm.reason ?? ''}`,
    );
  }
  lines.push(`- two dispatchers over one: ${num(w.twoOverOne, 2)}× (target ≥ 1.6×)`);
  lines.push(
    `- two dispatchers ${warmText(w.twoDispatchers)} = ${num(w.warmTwoOverOne, 2)}× one past start-up (CPU: both processes)`,
  );
  const two = w.twoDispatchers;
  if (two?.pgCpuUsPerDelivery !== undefined)
    lines.push(
      `- two dispatchers: ${num(two.pgCpuUsPerDelivery)} µs PostgreSQL backend CPU and ${num(two.queriesPerDelivery, 3)} round trips per delivery`,
    );
  const fifo = w.fifoDispatcher;
  if (fifo) {
    lines.push(
      fifo.status === 'ok' || fifo.status === 'incomplete'
        ? `- one FIFO endpoint (one dispatcher from a new process, the same backlog, one POST in flight at a time): ${num(fifo.deliveriesPerSec)} deliveries/s = ${num((fifo.deliveriesPerSec ?? 0) / Math.max(1, d.deliveriesPerSec ?? 0), 2)}× the unordered endpoint above; ${fifo.status}: ${num(fifo.verified)}/${num(fifo.events)} verified, ${num(fifo.duplicate)} duplicate, ${num(fifo.order?.misplaced)} of ${num(fifo.order?.checked)} events out of outbox order (first arrivals against seq); ${num(fifo.cpuUsPerDelivery)} µs dispatcher CPU, ${num(fifo.pgCpuUsPerDelivery)} µs PostgreSQL CPU, ${num(fifo.queriesPerDelivery, 3)} round trips per delivery; ${machineRunText(fifo.machine)}${fifo.reason ? `; ${fifo.reason}` : ''}`
        : `- one FIFO endpoint: ${fifo.status} ${fifo.reason ?? ''}`,
    );
  }
  const steady = w.steady;
  if (steady?.latency) {
    const l = steady.latency;
    lines.push(
      `- steady ${num(l.eventsPerSec)} events/s for ${num(l.published)} events (${num(l.publishedPerSec)}/s achieved, ${num(l.publishFailed)} publish calls failed), one dispatcher: publishPost's commit → receiver p50 ${num(l.fromCommit.p50Ms, 1)} ms, p99 ${num(l.fromCommit.p99Ms, 1)} ms, max ${num(l.fromCommit.maxMs, 1)} ms (target p50 ≤ 50, p99 ≤ 250); from sending the statement: p50 ${num(l.fromSend.p50Ms, 1)}, p99 ${num(l.fromSend.p99Ms, 1)} ms; ${num(steady.verified)}/${num(steady.events)} verified, ${num(steady.duplicate)} duplicate; ${num(steady.cpuUsPerDelivery)} µs dispatcher CPU, ${num(steady.pgCpuUsPerDelivery)} µs PostgreSQL CPU, ${num(steady.queriesPerDelivery, 3)} round trips per delivery`,
    );
    if (l.bySecond) {
      const b = l.bySecond;
      lines.push(
        `  - by when published: first second (the dispatcher just started) p50 ${num(b.firstSecond.p50Ms, 1)} / p99 ${num(b.firstSecond.p99Ms, 1)} ms; after it p50 ${num(b.afterFirstSecond.p50Ms, 1)} / p99 ${num(b.afterFirstSecond.p99Ms, 1)} / max ${num(b.afterFirstSecond.maxMs, 1)} ms; worst second: second ${b.worstSecond.second}, p99 ${num(b.worstSecond.p99Ms, 1)} ms; p99 per second: ${b.p99BySecond.map((v) => num(v, 0)).join(', ')} ms`,
      );
    }
    if (l.stages) lines.push(`  - ${stagesLine(l.stages)}`);
    const publisher = publisherLine(l);
    if (publisher) lines.push(`  - ${publisher}`);
  } else if (steady) {
    lines.push(`- steady rate: ${steady.status} ${steady.reason ?? ''}`);
  }
  const notify = w.steadyNotify;
  if (notify?.latency) {
    const l = notify.latency;
    lines.push(
      `- the same steady trial with publishPost's NOTIFY instead of the Redis wake-up (same run): ${num(l.publishedPerSec)}/s achieved (${num(l.publishFailed)} publish calls failed), commit → receiver p50 ${num(l.fromCommit.p50Ms, 1)} ms, p99 ${num(l.fromCommit.p99Ms, 1)} ms; from sending the statement: p50 ${num(l.fromSend.p50Ms, 1)}, p99 ${num(l.fromSend.p99Ms, 1)} ms`,
    );
    if (l.stages) lines.push(`  - ${stagesLine(l.stages)}`);
    const publisher = publisherLine(l);
    if (publisher) lines.push(`  - ${publisher}`);
  }
  const m = w.multiEndpoint;
  if (m) {
    const one = m.dispatcher;
    const two = m.twoDispatchers;
    const d = m.durableLoop?.deliveriesPerSec;
    lines.push(
      `- ${m.endpoints} endpoints on the same receiver (cap ${num(one.endpointCap)} each, ${num(m.deliveries)} deliveries): raw durable loop at ${num(m.durableLoop?.connections)} connections ${num(d?.median)}/s (${num(d?.min)}–${num(d?.max)}); one dispatcher ${num(one.deliveriesPerSec)}/s = ${num(m.durableRatio, 2)}× (${one.status}: ${num(one.verified)}/${num(one.events)} verified, ${num(one.duplicate)} duplicate; ${num(one.cpuUsPerDelivery)} µs dispatcher CPU, ${num(one.pgCpuUsPerDelivery)} µs PostgreSQL CPU, ${num(one.queriesPerDelivery, 3)} round trips per delivery); two dispatchers ${num(two?.deliveriesPerSec)}/s = ${num(m.twoOverOne, 2)}× one (${two?.status ?? 'skipped'}: ${num(two?.verified)}/${num(two?.events)} verified, ${num(two?.duplicate)} duplicate)`,
    );
    lines.push(
      `  - one dispatcher ${warmText(one)} = ${num(m.warmDurableRatio, 2)}× the raw durable loop; two dispatchers ${warmText(two)} = ${num(m.warmTwoOverOne, 2)}× one`,
    );
  }
  if (w.schedulerPass) {
    const p = w.schedulerPass.passMs;
    lines.push(
      `- scheduler pass (due scan, LIMIT 200) with ${num(w.schedulerPass.pendingRetries)} pending retries: ${num(p.median, 2)} ms median (${num(p.min, 2)}–${num(p.max, 2)})`,
    );
  }
  return lines;
}
