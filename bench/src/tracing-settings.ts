/**
 * What the tracing measurements share (the `tracing` scenario, bench/src/tracing.ts, and
 * bench/micro/tracing-micro.ts): the three settings they compare, the OTEL_* environment of each, and the
 * OTLP/HTTP sink the traced processes export to.
 */
import { createServer } from 'node:http';
import type { Pool } from 'undici';

export type TracingSettingId = 'off' | 'ratio-0.01' | 'ratio-1';

export interface TracingSetting {
  id: TracingSettingId;
  /** As the tables name it. */
  name: string;
  /** `OTEL_TRACES_SAMPLER_ARG` of `parentbased_traceidratio`; none: tracing off (no endpoint at all). */
  ratio?: string;
}

/** Off, then on with 1 % of new traces sampled, then on with every one: the order rounds take turns in. */
export const TRACING_SETTINGS: readonly TracingSetting[] = [
  { id: 'off', name: 'off' },
  { id: 'ratio-0.01', name: 'on, ratio 0.01', ratio: '0.01' },
  { id: 'ratio-1', name: 'on, ratio 1.0', ratio: '1' },
];

/** What the sink got for one setting. */
export interface SinkCount {
  /** POSTs answered (one per exported batch). */
  exports: number;
  bytes: number;
}

/**
 * A collector stand-in in this process: a node:http server on 127.0.0.1 that drains each export and
 * answers 200 at once, counting the exports and their bytes per setting (each setting exports to its own
 * path, `<url>/<setting id>/v1/traces`).
 */
export interface OtlpSink {
  readonly url: string;
  /** What `setting` has received so far (copies; zero for a setting nothing was exported for). */
  received(setting: TracingSettingId): SinkCount;
  /** Exports to paths that name no setting (none expected). */
  readonly strays: number;
  close(): Promise<void>;
}

export async function startOtlpSink(): Promise<OtlpSink> {
  const counts = new Map<string, SinkCount>();
  let strays = 0;
  const server = createServer((request, response) => {
    const id = /^\/([^/]+)\/v1\/traces$/.exec(request.url ?? '')?.[1];
    let into: SinkCount | undefined;
    if (id && TRACING_SETTINGS.some((setting) => setting.id === id)) {
      into = counts.get(id) ?? { exports: 0, bytes: 0 };
      counts.set(id, into);
    } else strays++;
    request.on('data', (chunk: Buffer) => {
      if (into) into.bytes += chunk.length;
    });
    request.on('end', () => {
      if (into) into.exports++;
      response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  // Keep-alive exporters must not hold the close up.
  server.keepAliveTimeout = 1_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    url,
    received: (setting) => ({ ...(counts.get(setting) ?? { exports: 0, bytes: 0 }) }),
    get strays() {
      return strays;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The OTEL_* environment of a Herald process at `setting`, exporting to `sink` (nothing when off). */
export function tracingEnv(setting: TracingSetting, sink: Pick<OtlpSink, 'url'>): Record<string, string> {
  if (setting.ratio === undefined) return {};
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: `${sink.url}/${setting.id}`,
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: setting.ratio,
  };
}

/** `value` against the off setting's, e.g. `+10.8 %`. */
export function againstOff(value: number, off: number): string {
  if (!Number.isFinite(value) || !Number.isFinite(off) || off === 0) return '–';
  const pct = ((value - off) / off) * 100;
  return `${pct >= 0 ? '+' : ''}${pct.toFixed(1)} %`;
}

/**
 * Keeps, per setting, the measurement with the lowest CPU per unit (and where it came from): on a shared
 * machine load moves between rounds, and the least disturbed round is the closest to the cost.
 */
export class LowestCpu<T extends { cpu: number }> {
  private readonly best = new Map<TracingSettingId, T>();

  offer(setting: TracingSettingId, measurement: T): void {
    if (!Number.isFinite(measurement.cpu)) return;
    const kept = this.best.get(setting);
    if (!kept || measurement.cpu < kept.cpu) this.best.set(setting, measurement);
  }

  get(setting: TracingSettingId): T | undefined {
    return this.best.get(setting);
  }
}

/** A bound on each request of the tracing micros (bench/micro/tracing-micro.ts, first-sampled.ts). */
const MICRO_REQUEST_TIMEOUT_MS = 10_000;

/**
 * The `posts(first: 10)` request of the tracing micros against the API process behind `pool`, checked (a
 * page of posts, or it throws); with `traceparent`, continuing that trace. `document`: another query taking
 * `$orgId` (the `tracing` scenario asks for the posts' authors too, as the HTTP section does).
 */
export function postsRequester(
  pool: Pool,
  token: string,
  orgId: string,
  document?: string,
): (traceparent?: string) => Promise<void> {
  const body = JSON.stringify(
    document === undefined
      ? { query: `{ posts(orgId: "${orgId}", first: 10) { edges { node { id title } } } }` }
      : { query: document, variables: { orgId } },
  );
  return async (traceparent) => {
    const response = await pool.request({
      path: '/graphql',
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${token}`,
        ...(traceparent ? { traceparent } : {}),
      },
      body,
      headersTimeout: MICRO_REQUEST_TIMEOUT_MS,
      bodyTimeout: MICRO_REQUEST_TIMEOUT_MS,
    });
    const text = await response.body.text();
    if (response.statusCode !== 200 || !text.includes('"edges"')) throw new Error(`bad answer: ${text}`);
  };
}

/** `count` posts of `orgId`, made through the API behind `pool` (what the micros' `posts` queries read). */
export async function seedPostsThroughApi(pool: Pool, token: string, orgId: string, count = 20): Promise<void> {
  for (let i = 0; i < count; i++) {
    const response = await pool.request({
      path: '/graphql',
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({
        query: 'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
        variables: { input: { orgId, title: `post ${i}` } },
      }),
    });
    await response.body.text();
  }
}

/**
 * The side-by-side window of the tracing micros: every pool loaded at once, `concurrency` requests in
 * flight each, until one of them has answered `requests`; `sample()` (one figure per pool: its process's
 * CPU) is read when the window opens and when it closes, with how many each answered meanwhile.
 */
export async function sideBySideWindow<T>(
  pools: readonly Pool[],
  options: { concurrency: number; requests: number; request: (pool: Pool) => Promise<void>; sample: () => T[] },
): Promise<{ before: T[]; after: T[]; done: number[]; seconds: number }> {
  const done = pools.map(() => 0);
  const before = options.sample();
  const started = performance.now();
  let closed: { after: T[]; done: number[]; seconds: number } | undefined;
  await Promise.all(
    pools.flatMap((pool, i) =>
      Array.from({ length: options.concurrency }, async () => {
        while (!closed) {
          await options.request(pool);
          done[i]!++;
          if (!closed && done[i]! >= options.requests)
            closed = { after: options.sample(), done: [...done], seconds: (performance.now() - started) / 1000 };
        }
      }),
    ),
  );
  return { before, ...closed! };
}
