import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, waitFor } from '@herald/testing/ports';
import { parse, stringify } from 'yaml';

// Debian's `prometheus` package (apt-get install -y --no-install-recommends prometheus; `.ci/run` installs
// it) gives both binaries. Never downloaded; a missing binary fails the test with the install command.

/** The shipped rules, scrape config and the rules' unit tests: the tests load exactly these files. */
export const ALERTS_FILE = fileURLToPath(new URL('../../deploy/prometheus/alerts.yml', import.meta.url));
export const ALERTS_TEST_FILE = fileURLToPath(new URL('../../deploy/prometheus/alerts.test.yml', import.meta.url));
export const PROMETHEUS_CONFIG = fileURLToPath(new URL('../../deploy/prometheus/prometheus.yml', import.meta.url));

const PROMTOOL_BINARY = process.env.PROMTOOL_BIN ?? 'promtool';
const PROMETHEUS_BINARY = process.env.PROMETHEUS_BIN ?? 'prometheus';
const START_TIMEOUT_MS = 30_000;
/** A promtool run that takes longer than this is stuck (the slowest, the rules' unit tests, takes ~2 s). */
const PROMTOOL_TIMEOUT_MS = 60_000;
/** How often the test Prometheus scrapes and evaluates rules (the shipped config says 15s). */
const TEST_INTERVAL = '1s';

function missingBinary(binary: string, variable: string): Error {
  return new Error(
    `${binary} not found: this test runs a real Prometheus; install Debian's prometheus ` +
      `(apt-get install -y --no-install-recommends prometheus) or set ${variable} to the binary`,
  );
}

export interface PromtoolResult {
  code: number;
  /** stdout and stderr together: promtool reports failures on either. */
  output: string;
}

/** Runs `promtool args…` in `cwd`; resolves with its exit code and output, whatever the code. */
export function promtool(args: string[], cwd?: string): Promise<PromtoolResult> {
  return new Promise((resolve, reject) => {
    execFile(PROMTOOL_BINARY, args, { cwd, timeout: PROMTOOL_TIMEOUT_MS }, (error, stdout, stderr) => {
      const code = (error as NodeJS.ErrnoException | null)?.code;
      if (code === 'ENOENT') return reject(missingBinary(PROMTOOL_BINARY, 'PROMTOOL_BIN'));
      if (error?.killed) return reject(new Error(`promtool ${args.join(' ')} timed out:\n${stdout}${stderr}`));
      resolve({ code: typeof code === 'number' ? code : error ? 1 : 0, output: `${stdout}${stderr}` });
    });
  });
}

/**
 * The shipped prometheus.yml made to run here: every job keeps its name and labels (the namespace label the
 * rules aggregate by), its targets become `targets[job]`, the rule file is the repository's alerts.yml, and
 * scrapes and rule evaluations run every second. The self-scrape job `prometheus` gets `self`.
 * @throws Error when a shipped job has no targets given: a new job must be covered by the test
 */
export async function renderPrometheusConfig(
  targets: Record<string, string[]>,
  self: string,
  rulesFile = ALERTS_FILE,
): Promise<string> {
  const config = parse(await readFile(PROMETHEUS_CONFIG, 'utf8'));
  config.global = { ...config.global, scrape_interval: TEST_INTERVAL, evaluation_interval: TEST_INTERVAL };
  config.rule_files = [rulesFile];
  for (const job of config.scrape_configs as { job_name: string; static_configs: { targets: string[] }[] }[]) {
    const given = job.job_name === 'prometheus' ? [self] : targets[job.job_name];
    if (!given) throw new Error(`deploy/prometheus/prometheus.yml has a job ${job.job_name} the test gives no targets`);
    job.static_configs = job.static_configs.map((entry) => ({ ...entry, targets: given }));
  }
  return stringify(config);
}

/** One sample of an instant query's vector: its labels and value. */
export interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

/** An alert as `/api/v1/alerts` lists it. */
export interface PrometheusAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: 'pending' | 'firing';
  value: string;
}

export interface PrometheusServer {
  baseUrl: string;
  /** An instant query (`/api/v1/query`); throws on a query Prometheus rejects. */
  query(expr: string): Promise<Sample[]>;
  /** `/api/v1/<path>`'s `data`, throwing unless the status is success. */
  api<T>(path: string): Promise<T>;
  /** The alerts pending or firing now. */
  alerts(): Promise<PrometheusAlert[]>;
  output(): string;
  stop(): Promise<void>;
}

/**
 * Starts a real Prometheus on a free 127.0.0.1 port with a temporary data folder, scraping `targets` (job
 * name → host:port list) with the shipped config and rules (see {@link renderPrometheusConfig}). The
 * config is checked with `promtool check config` first. Resolves once `/-/ready` answers.
 */
export async function startPrometheus(targets: Record<string, string[]>): Promise<PrometheusServer> {
  const dir = await mkdtemp(join(tmpdir(), 'herald-prometheus-'));
  const port = await freePort();
  const address = `127.0.0.1:${port}`;
  const configFile = join(dir, 'prometheus.yml');
  await writeFile(configFile, await renderPrometheusConfig(targets, address));
  const checked = await promtool(['check', 'config', configFile]);
  if (checked.code !== 0) throw new Error(`promtool check config failed:\n${checked.output}`);

  const child: ChildProcess = spawn(
    PROMETHEUS_BINARY,
    [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=${address}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let output = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  const spawnError = once(child, 'spawn').then(
    () => undefined,
    (error: NodeJS.ErrnoException) => error,
  );
  // Not once(child, 'exit'): that also rejects on the spawn error handled above.
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const baseUrl = `http://${address}`;
  const failed = await spawnError;
  if (failed) {
    await rm(dir, { recursive: true, force: true });
    throw failed.code === 'ENOENT' ? missingBinary(PROMETHEUS_BINARY, 'PROMETHEUS_BIN') : failed;
  }
  await waitFor(
    `Prometheus to be ready on ${address}`,
    async () => {
      if (child.exitCode !== null) throw new Error(`prometheus exited with ${child.exitCode}:\n${output}`);
      return (await fetch(`${baseUrl}/-/ready`).catch(() => undefined))?.status === 200;
    },
    { timeoutMs: START_TIMEOUT_MS, intervalMs: 100 },
  );

  async function api<T>(path: string): Promise<T> {
    const response = await fetch(`${baseUrl}/api/v1/${path}`, { signal: AbortSignal.timeout(10_000) });
    const body = (await response.json()) as { status: string; data: T; error?: string };
    if (body.status !== 'success') throw new Error(`Prometheus /api/v1/${path}: ${body.error ?? response.status}`);
    return body.data;
  }
  return {
    baseUrl,
    api,
    async query(expr) {
      const data = await api<{ resultType: string; result: Sample[] }>(`query?query=${encodeURIComponent(expr)}`);
      if (data.resultType !== 'vector') throw new Error(`${expr} is a ${data.resultType}, not a vector`);
      return data.result;
    },
    async alerts() {
      return (await api<{ alerts: PrometheusAlert[] }>('alerts')).alerts;
    },
    output: () => output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
