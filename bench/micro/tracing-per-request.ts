/**
 * What one sampled request costs beside the unsampled ones around it: one API process (single mode,
 * PostgreSQL) traced with `parentbased_traceidratio` at ratio 0, so a request is sampled only when the
 * bench sends it a sampled `traceparent`. One request at a time; each request's CPU is every thread of the
 * process (/proc/<pid>/task/<tid>/schedstat, ns) from just before it is sent until the loop turn after its
 * answer. Phases of `requests` each: two with nothing sampled, `phases` with one request in `every` sampled,
 * then two with nothing sampled again; each prints the mean and median CPU of its unsampled and sampled
 * requests. Comparing the two kinds within one phase holds better on a shared machine than comparing
 * phases: a process's CPU per request drifts by ±40 % from one phase to the next here with nothing changed.
 * Spans are exported OTLP/protobuf to a sink in this process. Bounded: a fixed count per phase.
 *   node --import tsx bench/micro/tracing-per-request.ts [requests=3000] [every=100] [phases=6]
 * Results: bench/results/tracing/warm-up-8s/README.md.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { signToken } from '@herald/auth';
import pg from 'pg';
import { Pool } from 'undici';
import { type ApiProcess, startApiProcess } from '../../test/support/api-process.js';
import { UNLIMITED_TENANT_QUOTAS } from '../src/common.js';
import { startOtlpSink } from '../src/tracing-settings.js';

const JWT_SECRET = 'tracing-micro-secret-0123456789abcdef';
const ORG = 'org-tracing-per-request';
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const requests = Number(process.argv[2] ?? 3_000);
const every = Math.max(2, Number(process.argv[3] ?? 100));
const phases = Math.max(1, Number(process.argv[4] ?? 6));
const sink = await startOtlpSink();
const token = await signToken(JWT_SECRET, { sub: 'bench', name: 'Bench', orgs: [ORG] });
const body = JSON.stringify({ query: `{ posts(orgId: "${ORG}", first: 10) { edges { node { id title } } } }` });
/** CPU of every thread of `pid` so far, ns. */
const cpuNs = (pid: number) =>
  readdirSync(`/proc/${pid}/task`).reduce((sum, t) => {
    try {
      return sum + Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      return sum;
    }
  }, 0);
const hex = (n: number) => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join('');
const schemaName = `tracing_per_request_${process.pid}`;
const admin = new pg.Client({ connectionString: base });
await admin.connect();
await admin.query(`create schema ${schemaName}`);
const u = new URL(base);
u.searchParams.set('options', `-c search_path=${schemaName}`);
let api: ApiProcess | undefined;
let pool: Pool | undefined;
try {
  api = await startApiProcess({
    DATABASE_URL: u.toString(),
    JWT_SECRET,
    ...UNLIMITED_TENANT_QUOTAS,
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0',
    OTEL_EXPORTER_OTLP_ENDPOINT: `${sink.url}/ratio-0.01`,
  });
  const client = new Pool(api.baseUrl, { connections: 1 });
  pool = client;
  const pid = api.child.pid!;
  /** One GraphQL request, checked; with a sampled `traceparent` of a new trace when `sampled`. */
  const graphql = async (requestBody: string, sampled: boolean) => {
    const headers: Record<string, string> = { 'content-type': 'application/json', authorization: `Bearer ${token}` };
    if (sampled) headers.traceparent = `00-${hex(32)}-${hex(16)}-01`;
    const answer = await client.request({ path: '/graphql', method: 'POST', headers, body: requestBody });
    const text = await answer.body.text();
    if (answer.statusCode !== 200 || text.includes('"errors"')) throw new Error(`bad answer: ${text}`);
  };
  // The posts the queries read: 20, made through the API.
  for (let i = 0; i < 20; i++)
    await graphql(
      JSON.stringify({
        query: 'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
        variables: { input: { orgId: ORG, title: `p${i}` } },
      }),
      false,
    );
  /** `n` requests, one in `sampleEvery` sampled (0: none); prints the CPU of each kind. */
  const phase = async (name: string, n: number, sampleEvery: number) => {
    const unsampled: number[] = [];
    const sampled: number[] = [];
    const startedNs = cpuNs(pid);
    for (let i = 0; i < n; i++) {
      const isSampled = sampleEvery > 0 && i % sampleEvery === sampleEvery - 1;
      const before = cpuNs(pid);
      await graphql(body, isSampled);
      await new Promise((resolve) => setImmediate(resolve));
      (isSampled ? sampled : unsampled).push(cpuNs(pid) - before);
    }
    const total = cpuNs(pid) - startedNs;
    const mean = (a: number[]) => (a.length ? a.reduce((x, y) => x + y, 0) / a.length / 1000 : Number.NaN);
    const median = (a: number[]) =>
      a.length ? [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]! / 1000 : Number.NaN;
    console.log(
      `${name}: total ${(total / n / 1000).toFixed(0)} µs/req; unsampled mean ${mean(unsampled).toFixed(0)} med ${median(unsampled).toFixed(0)} µs; sampled (${sampled.length}) mean ${mean(sampled).toFixed(0)} med ${median(sampled).toFixed(0)} µs; exports ${sink.received('ratio-0.01').exports}`,
    );
  };
  await phase('warm-up', requests, 0);
  for (let k = 0; k < 2; k++) await phase('nothing sampled', requests, 0);
  for (let k = 0; k < phases; k++) await phase(`1 in ${every} sampled`, requests, every);
  for (let k = 0; k < 2; k++) await phase('nothing sampled again', requests, 0);
} finally {
  await pool?.close().catch(() => {});
  await api?.stop('SIGTERM').catch(() => api?.child.kill('SIGKILL'));
  await admin.query(`drop schema ${schemaName} cascade`).catch(() => {});
  await admin.end().catch(() => {});
  await sink.close();
}
