/**
 * Which functions V8 throws optimised code away for, and when: one API process (single mode, PostgreSQL)
 * under `--trace-deopt`, tracing on at `DEOPT_PROBE_RATIO` (default 0; `off` for no OTEL_* variable at all),
 * exporting to a sink in this process. It serves `posts(first: 10)` for a warm-up of `warmup` requests and
 * lists the functions deoptimised meanwhile (name and reason), then runs each action of `actions` and
 * counts the deoptimisations during it and in the `requests` requests after it:
 * - `none`: nothing;
 * - `sampled`: 20 requests whose `traceparent` says "sampled" (note: a header the others do not send);
 * - `client`: the process sends one HTTP client request to the sink (a preload, on SIGUSR2), as an exporter
 *   on the main thread would.
 * Counts, not timings: deterministic enough to compare two trees or two ratios on a loaded machine.
 *   node --import tsx bench/micro/deopt-probe.ts [actions=none,client,none] [requests=4000] [warmup=30000]
 * Results: bench/results/tracing/low-ratio-costs.md ("fifth look").
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { signToken } from '@herald/auth';
import pg from 'pg';
import { Pool } from 'undici';
import { startApiProcess } from '../../test/support/api-process.js';
import { UNLIMITED_TENANT_QUOTAS } from '../src/common.js';
import { postsRequester, seedPostsThroughApi, startOtlpSink } from '../src/tracing-settings.js';

const actions = (process.argv[2] ?? 'none,client,none').split(',');
const perPhase = Number(process.argv[3] ?? 4_000);
const warmUp = Number(process.argv[4] ?? 30_000);
const ratio = process.env.DEOPT_PROBE_RATIO ?? '0';
const CONCURRENCY = 16;
const TSX = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const JWT_SECRET = 'deopt-probe-secret-0123456789abcdef';
const ORG = 'org-deopt-probe';
const base = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const PRELOAD = `
const http = require('node:http');
const agent = new http.Agent({ keepAlive: true });
process.on('SIGUSR2', () => {
  const request = http.request(process.env.DEOPT_PROBE_SINK, { method: 'POST', agent }, (response) => response.resume());
  request.on('error', () => {});
  request.end(Buffer.alloc(20_000));
});
`;
const dir = mkdtempSync(join(tmpdir(), 'herald-deopt-probe-'));
const preload = join(dir, 'client-on-signal.cjs');
writeFileSync(preload, PRELOAD);

const sink = await startOtlpSink();
const token = await signToken(JWT_SECRET, { sub: 'bench', name: 'Bench', orgs: [ORG] });
const schemaName = `deopt_probe_${process.pid}`;
const admin = new pg.Client({ connectionString: base });
await admin.connect();
await admin.query(`create schema ${schemaName}`);
const schemaUrl = new URL(base);
schemaUrl.searchParams.set('options', `-c search_path=${schemaName}`);
const tracing: Record<string, string> =
  ratio === 'off'
    ? {}
    : {
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: ratio,
        OTEL_EXPORTER_OTLP_ENDPOINT: `${sink.url}/ratio-0.01`,
      };

/** `[bailout (kind: …, reason: R): begin. deoptimizing …, <JSFunction NAME …` → `NAME (R)`. */
function deoptimised(lines: string[]): string[] {
  return lines.flatMap((line) => {
    const found = /reason: ([^)]*)\).*?<JSFunction ([^ >]*)/.exec(line);
    return found ? [`${found[2]} (${found[1]})`] : [];
  });
}

const api = await startApiProcess(
  {
    DATABASE_URL: schemaUrl.toString(),
    JWT_SECRET,
    ...UNLIMITED_TENANT_QUOTAS,
    ...tracing,
    DEOPT_PROBE_SINK: `${sink.url}/ratio-1/v1/traces`,
  },
  { cwd: process.cwd(), args: ['--trace-deopt', '--require', preload, '--import', TSX, 'apps/api/src/main.ts'] },
);
const pool = new Pool(api.baseUrl, { connections: CONCURRENCY });
const request = postsRequester(pool, token, ORG);
async function load(count: number) {
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < count) await request();
    }),
  );
}
try {
  await seedPostsThroughApi(pool, token, ORG);
  await load(warmUp);
  const warm = [...new Set(deoptimised(api.stdout))].sort();
  console.log(`ratio ${ratio}: ${warm.length} functions deoptimised during a warm-up of ${warmUp} requests`);
  console.log(warm.join('; '));
  for (const action of actions) {
    const mark = api.stdout.length;
    if (action === 'client') {
      api.child.kill('SIGUSR2');
      await new Promise((resolve) => setTimeout(resolve, 500));
    } else if (action === 'sampled') {
      for (let i = 0; i < 20; i++)
        await request(`00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-01`);
      await new Promise((resolve) => setTimeout(resolve, 6_000));
    } else if (action !== 'none') throw new Error(`unknown action ${action}: none, sampled or client`);
    const during = deoptimised(api.stdout.slice(mark));
    const after = api.stdout.length;
    await load(perPhase);
    const following = deoptimised(api.stdout.slice(after));
    console.log(
      `${action}: ${during.length} deoptimisations during it, ${following.length} in the ${perPhase} requests after`,
    );
    if (during.length > 0) console.log(`  during: ${[...new Set(during)].sort().join('; ')}`);
    if (following.length > 0) console.log(`  after: ${[...new Set(following)].sort().join('; ')}`);
  }
} finally {
  await pool.close();
  await api.stop('SIGTERM');
  await admin.query(`drop schema ${schemaName} cascade`);
  await admin.end();
  await sink.close();
  rmSync(dir, { recursive: true, force: true });
}
