import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createTestSchema, TEST_ENCRYPTION_KEYS, type TestSchema } from '@herald/testing';
import { freePort, waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse } from 'yaml';
import { type ApiProcess, startApiProcess } from '../support/api-process.js';

// deploy/grafana/herald-dashboard.json and deploy/prometheus/alerts.yml query Herald's metrics by name; a
// misspelt or removed metric shows an empty panel or an alert that can never fire, silently. Here a
// running Herald in cluster mode (an API process and a webhook-dispatcher process on real PostgreSQL and
// Redis) is scraped, and every metric either file names must be among what the two /metrics export.

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DASHBOARD_FILE = join(ROOT, 'deploy/grafana/herald-dashboard.json');
const ALERTS_FILE = join(ROOT, 'deploy/prometheus/alerts.yml');
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const JWT_SECRET = 'monitoring-test-secret-0123456789abcdef';
const START_TIMEOUT_MS = 60_000;
/** Series suffixes Prometheus adds to a histogram (or summary) name. */
const HISTOGRAM_SERIES = /_(bucket|sum|count)$/;
/** Grafana's reference to the dashboard's `datasource` variable (a literal, not a template string). */
const DATASOURCE_VARIABLE = ['$', '{datasource}'].join('');

interface Dashboard {
  uid: string;
  templating: { list: { name: string }[] };
  panels: { id: number; type: string; title: string; datasource?: { uid: string }; targets?: { expr: string }[] }[];
}

const dashboard = JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8')) as Dashboard;
const alertRules: { alert: string; expr: string }[] = parse(readFileSync(ALERTS_FILE, 'utf8')).groups.flatMap(
  (group: { rules: unknown[] }) => group.rules,
);

/** `herald_…` names in a PromQL expression (label names and values never start with `herald_`). */
function metricNames(expr: string): string[] {
  return [...new Set(expr.match(/\bherald_[a-z0-9_]+\b/g) ?? [])];
}

/** `# TYPE <name> <type>` lines of a Prometheus text exposition: metric name → type. */
function exportedMetrics(exposition: string): Map<string, string> {
  const types = new Map<string, string>();
  for (const [, name, type] of exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)) types.set(name!, type!);
  return types;
}

/** Whether a queried series name is exported: the metric itself, or a histogram's _bucket/_sum/_count. */
function isExported(name: string, exported: Map<string, string>): boolean {
  if (exported.has(name)) return true;
  const base = name.replace(HISTOGRAM_SERIES, '');
  return base !== name && ['histogram', 'summary'].includes(exported.get(base) ?? '');
}

let schema: TestSchema;
let api: ApiProcess | undefined;
let dispatcher: ChildProcess | undefined;
let dispatcherUrl: string;
let dispatcherOutput = '';
let exported: Map<string, string>;

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  const env = {
    DATABASE_URL: schema.url,
    REDIS_URL: inject('redisUrl'),
    HERALD_REDIS_PREFIX: `herald-monitoring-test:${schema.schema}:`,
    HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
    JWT_SECRET,
  };
  // The API first: it migrates the schema the dispatcher then reads.
  api = await startApiProcess(env);
  const port = await freePort();
  dispatcher = spawn(process.execPath, ['--import', TSX_LOADER, 'apps/webhook-dispatcher/src/main.ts'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  for (const stream of [dispatcher.stdout, dispatcher.stderr]) {
    stream?.setEncoding('utf8').on('data', (chunk: string) => {
      dispatcherOutput += chunk;
    });
  }
  dispatcherUrl = `http://127.0.0.1:${port}`;
  await waitFor(
    'the webhook dispatcher to answer /health',
    async () => {
      if (dispatcher!.exitCode !== null) throw new Error(`dispatcher exited:\n${dispatcherOutput}`);
      return (await fetch(`${dispatcherUrl}/health`).catch(() => undefined))?.status === 200;
    },
    { timeoutMs: START_TIMEOUT_MS, intervalMs: 200 },
  );

  exported = new Map();
  for (const url of [`${api.baseUrl}/metrics`, `${dispatcherUrl}/metrics`]) {
    const response = await fetch(url);
    expect(response.status, url).toBe(200);
    for (const [name, type] of exportedMetrics(await response.text())) exported.set(name, type);
  }
}, 2 * START_TIMEOUT_MS);

afterAll(async () => {
  if (dispatcher && dispatcher.exitCode === null) {
    const exited = once(dispatcher, 'exit');
    dispatcher.kill('SIGTERM');
    await exited;
  }
  await api?.stop();
  await schema?.drop();
});

describe('deploy/grafana/herald-dashboard.json', () => {
  const queryPanels = dashboard.panels.filter((panel) => panel.type !== 'row');

  it('is a dashboard with unique panel ids whose every panel queries the chosen Prometheus data source', () => {
    expect(dashboard.uid).toBe('herald-overview');
    expect(dashboard.templating.list.map((variable) => variable.name)).toEqual(['datasource', 'namespace']);
    const ids = dashboard.panels.map((panel) => panel.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const panel of queryPanels) {
      expect(panel.datasource?.uid, panel.title).toBe(DATASOURCE_VARIABLE);
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
    }
  });

  it('covers sockets, subscriptions, shared groups, events, webhook outcomes, latency, dead letters and disabled endpoints', () => {
    const queried = new Set(
      queryPanels.flatMap((panel) => panel.targets!.flatMap((target) => metricNames(target.expr))),
    );
    for (const metric of [
      'herald_ws_open_sockets',
      'herald_subscriptions_active',
      'herald_subscription_groups_active',
      'herald_events_published_total',
      'herald_webhook_attempts_total',
      'herald_webhook_delivery_seconds_bucket',
      'herald_webhook_dead_letters_total',
      'herald_webhook_stream_lag',
      'herald_webhook_dead_deliveries',
      'herald_webhook_disabled_endpoints',
      'herald_webhook_endpoints_disabled_total',
    ]) {
      expect(queried, metric).toContain(metric);
    }
  });

  it('queries only metrics a running API or dispatcher exports', () => {
    for (const panel of queryPanels) {
      for (const target of panel.targets!) {
        const names = metricNames(target.expr);
        expect(names.length, `${panel.title}: ${target.expr}`).toBeGreaterThan(0);
        for (const name of names) {
          expect(isExported(name, exported), `${panel.title}: ${name} is not exported`).toBe(true);
        }
      }
    }
  });
});

describe('deploy/prometheus/alerts.yml', () => {
  it.each(alertRules)('$alert queries only metrics a running API or dispatcher exports', (rule) => {
    const names = metricNames(rule.expr);
    expect(names.length).toBeGreaterThan(0);
    for (const name of names) expect(isExported(name, exported), `${name} is not exported`).toBe(true);
  });
});

describe('the check itself', () => {
  it('tells a histogram series from a misspelt metric', () => {
    const types = exportedMetrics('# TYPE herald_x_seconds histogram\n# TYPE herald_y_total counter\n');
    expect(isExported('herald_x_seconds_bucket', types)).toBe(true);
    expect(isExported('herald_y_total', types)).toBe(true);
    expect(isExported('herald_y_total_count', types)).toBe(false);
    expect(isExported('herald_z_total', types)).toBe(false);
  });
});
