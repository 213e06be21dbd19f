import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { fileURLToPath } from 'node:url';
import { signToken } from '@herald/auth';
import { createTestSchema, type TestSchema } from '@herald/testing';
import { freePort, waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse } from 'yaml';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { type DispatcherProcess, startDispatcherProcess } from './support/dispatcher-process.js';
import { postGraphql } from './support/graphql-http.js';
import {
  ALERTS_FILE,
  type PrometheusAlert,
  type PrometheusServer,
  type Sample,
  startPrometheus,
} from './support/prometheus.js';
import { createAndPublish } from './support/subscribers.js';

// A real Prometheus, configured from deploy/prometheus/prometheus.yml and loading deploy/prometheus/alerts.yml
// unchanged, scrapes a cluster-mode Herald: two API pods and a webhook dispatcher on real PostgreSQL and
// Redis. A receiver that always answers 500 gets deliveries dead-lettered, and the dead-letter alert fires
// in Prometheus; a second endpoint answering 410 Gone is disabled, and its alert fires too; with every
// attempt failing, the failure-rate alert goes pending (its `for:` is 10 minutes), and so does the one for
// dead deliveries waiting (a day). Every shipped alert is thus seen live. Then every query of deploy/grafana/herald-dashboard.json must return a series from that
// Prometheus, and every selector of the alert rules must match scraped series: a misspelt metric or
// label would leave a panel empty or an alert that can never fire.
//
// The shipped rules are loaded as they are: the dead-letter and disabled-endpoint alerts have no `for:`, so
// they fire at the first evaluation after the scrape that sees the count grow; the test Prometheus scrapes
// and evaluates every second instead of the shipped 15 s.

const DASHBOARD_FILE = fileURLToPath(new URL('../deploy/grafana/herald-dashboard.json', import.meta.url));
const JWT_SECRET = 'prometheus-alerts-test-secret-0123456789';
const ORG = `org-${randomUUID()}`;
/** Posts published to both endpoints: enough failed attempts (one per post) for the failure-rate alert. */
const POSTS = 25;
/** The namespace label deploy/prometheus/prometheus.yml gives every Herald target. */
const NAMESPACE = 'herald';
/** Scrapes and evaluations run every second; this bounds a handful of them on a busy machine. */
const PROMETHEUS_WAIT_MS = 30_000;
/** Grafana's variables as a test query fills them: every namespace, a rate window of many scrapes. */
const GRAFANA_VARIABLES: Record<string, string> = { namespace: '.*', __rate_interval: '1m' };

interface Dashboard {
  templating: { list: { name: string; query?: string | { query: string } }[] };
  panels: { title: string; type: string; targets?: { expr: string; legendFormat?: string }[] }[];
}

/** Fills `$name`, `${name}` and `[[name]]` the way Grafana would with {@link GRAFANA_VARIABLES}. */
function fillVariables(expr: string): string {
  const filled = expr.replace(/\$\{(\w+)\}|\$(\w+)|\[\[(\w+)\]\]/g, (match, ...names: (string | undefined)[]) => {
    const name = names.slice(0, 3).find((candidate) => candidate !== undefined)!;
    const value = GRAFANA_VARIABLES[name];
    if (value === undefined) throw new Error(`no test value for the Grafana variable in ${match}`);
    return value;
  });
  return filled;
}

/** The `herald_…` vector selectors of a PromQL expression, with their label matchers if any. */
function heraldSelectors(expr: string): string[] {
  return [...new Set(expr.match(/\bherald_[a-z0-9_]+(\{[^}]*\})?/g) ?? [])];
}

let schema: TestSchema;
let pods: ApiProcess[] = [];
let dispatcher: DispatcherProcess | undefined;
let prometheus: PrometheusServer | undefined;
let receiver: Server;
let token: string;
const receiverHits = { failing: 0, gone: 0 };

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  // Every delivery fails: with a retry horizon shorter than the first backoff, the first failure is final.
  // /gone answers 410, which disables its endpoint at once.
  receiver = createServer((request, response) => {
    request.resume().on('end', () => {
      const gone = request.url === '/gone';
      receiverHits[gone ? 'gone' : 'failing']++;
      response.writeHead(gone ? 410 : 500).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const env = {
    DATABASE_URL: schema.url,
    REDIS_URL: inject('redisUrl'),
    HERALD_REDIS_PREFIX: `herald-prometheus-test:${schema.schema}:`,
    JWT_SECRET,
    WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
  };
  token = await signToken(JWT_SECRET, { sub: 'writer', name: 'Writer', orgs: [ORG] });
  pods = await Promise.all([startApiProcess(env), startApiProcess(env)]);
  const dispatcherPort = await freePort();
  dispatcher = await startDispatcherProcess({
    ...env,
    PORT: String(dispatcherPort),
    WEBHOOK_RETRY_HORIZON: '1s',
    WEBHOOK_RETRY_BASE_MS: '5000',
    WEBHOOK_POLL_INTERVAL_MS: '100',
  });
  prometheus = await startPrometheus({
    'herald-api': pods.map((pod) => `127.0.0.1:${pod.port}`),
    'herald-webhook-dispatcher': [`127.0.0.1:${dispatcherPort}`],
  });
  await waitFor(
    'Prometheus to scrape both pods, the dispatcher and itself',
    async () => {
      const up = await prometheus!.query('up == 1');
      return up.length === pods.length + 2;
    },
    { timeoutMs: PROMETHEUS_WAIT_MS, intervalMs: 250 },
  );
}, 180_000);

afterAll(async () => {
  await prometheus?.stop();
  await dispatcher?.stop('SIGTERM');
  await Promise.all(pods.map((pod) => pod.stop('SIGTERM')));
  await new Promise((resolve) => receiver?.close(resolve));
  await schema?.drop();
});

describe('a real Prometheus scraping two API pods and a webhook dispatcher', () => {
  it('loads every shipped alert rule', async () => {
    const shipped = (parse(await readFile(ALERTS_FILE, 'utf8')) as { groups: { rules: { alert: string }[] }[] }).groups
      .flatMap((group) => group.rules)
      .map((rule) => rule.alert);
    const { groups } = await prometheus!.api<{ groups: { rules: { name: string; health: string }[] }[] }>(
      'rules?type=alert',
    );
    const loaded = groups.flatMap((group) => group.rules);
    expect(loaded.map((rule) => rule.name).sort()).toEqual([...shipped].sort());
    await waitFor('every alert rule to be evaluated without error', async () => {
      const { groups: now } = await prometheus!.api<{ groups: { rules: { health: string }[] }[] }>('rules?type=alert');
      return now.flatMap((group) => group.rules).every((rule) => rule.health === 'ok');
    });
  });

  it('fires the dead-letter and disabled-endpoint alerts and holds the other two pending, none before', async () => {
    // The counters' zeros must be scraped first: increase() needs a sample from before they grow.
    await waitFor(
      'a scrape of the dispatcher with nothing dead-lettered or disabled',
      async () =>
        (await prometheus!.query('herald_webhook_dead_letters_total + herald_webhook_endpoints_disabled_total == 0'))
          .length === 1,
      { timeoutMs: PROMETHEUS_WAIT_MS, intervalMs: 250 },
    );
    const scrapedAt = Date.now();
    await waitFor('a rule evaluation after that scrape', () => evaluatedAfter(scrapedAt), {
      timeoutMs: PROMETHEUS_WAIT_MS,
      intervalMs: 250,
    });
    expect(await prometheus!.alerts()).toEqual([]);

    const { port } = receiver.address() as { port: number };
    for (const path of ['/failing', '/gone']) {
      const endpoint = await postGraphql(
        pods[0]!.baseUrl,
        token,
        'mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }',
        { input: { orgId: ORG, url: `http://127.0.0.1:${port}${path}`, eventTypes: ['post.published'] } },
      );
      expect(endpoint.body.errors).toBeUndefined();
    }
    for (let i = 0; i < POSTS; i++) {
      const published = await createAndPublish(pods[i % pods.length]!.baseUrl, token, ORG, `never acknowledged ${i}`);
      expect(published.errors).toBeUndefined();
    }

    const expected = {
      HeraldWebhookDeadLetters: 'firing',
      HeraldWebhookEndpointDisabled: 'firing',
      HeraldWebhookFailureRateHigh: 'pending',
      HeraldWebhookDeadDeliveriesWaiting: 'pending',
    };
    let alerts: PrometheusAlert[] = [];
    const states = () => Object.fromEntries(alerts.map((alert) => [alert.labels.alertname, alert.state]));
    await waitFor(
      `Prometheus to show ${JSON.stringify(expected)}`,
      async () => {
        alerts = await prometheus!.alerts();
        return Object.entries(expected).every(([name, state]) => states()[name] === state);
      },
      { timeoutMs: PROMETHEUS_WAIT_MS, intervalMs: 250 },
    ).catch((error: Error) => {
      throw new Error(`${error.message}; alerts now: ${JSON.stringify(alerts)}`);
    });
    expect(states()).toEqual(expected);
    expect(receiverHits.failing).toBeGreaterThanOrEqual(POSTS);
    expect(receiverHits.gone).toBeGreaterThan(0);
    for (const alert of alerts) {
      expect(alert.labels.namespace, alert.labels.alertname).toBe(NAMESPACE);
      expect(Number(alert.value), alert.labels.alertname).toBeGreaterThan(0);
    }
    const deadLetters = alerts.find((alert) => alert.labels.alertname === 'HeraldWebhookDeadLetters')!;
    expect(deadLetters.labels.severity).toBe('critical');
    expect(deadLetters.annotations.description).toContain(`in namespace ${NAMESPACE} exhausted`);
  });

  it('has a series for every query of the Grafana dashboard', async () => {
    const dashboard = JSON.parse(await readFile(DASHBOARD_FILE, 'utf8')) as Dashboard;
    const queries = dashboard.panels.flatMap((panel) =>
      (panel.targets ?? []).map((target) => ({
        name: `${panel.title}: ${target.expr}`,
        expr: fillVariables(target.expr),
        legendLabels: [...(target.legendFormat ?? '').matchAll(/\{\{\s*(\w+)\s*\}\}/g)].map((match) => match[1]!),
      })),
    );
    expect(queries.length).toBeGreaterThan(0);
    // Rates need two scrapes of a series inside their window: retry a few scrapes before calling one empty.
    let empty: string[] = [];
    let results: Sample[][] = [];
    await waitFor(
      'every dashboard query to return a series',
      async () => {
        results = await Promise.all(queries.map((query) => prometheus!.query(query.expr)));
        empty = queries.filter((_, i) => results[i]!.length === 0).map((query) => query.name);
        return empty.length === 0;
      },
      { timeoutMs: PROMETHEUS_WAIT_MS, intervalMs: 1_000 },
    ).catch((error: Error) => {
      throw new Error(`${error.message}; empty:\n${empty.join('\n')}`);
    });
    // A legend names labels of the series (`{{pod}}{{instance}}`: whichever the platform sets): at least
    // one of them must be there, or every line of the panel is labelled the same empty string.
    queries.forEach((query, i) => {
      if (query.legendLabels.length === 0) return;
      const labels = new Set(results[i]!.flatMap((sample) => Object.keys(sample.metric)));
      expect(
        query.legendLabels.some((label) => labels.has(label)),
        `${query.name}: legend labels ${query.legendLabels.join(', ')}`,
      ).toBe(true);
    });

    // The namespace variable's own query lists the namespace the scrape config sets.
    for (const variable of dashboard.templating.list) {
      const query = typeof variable.query === 'object' ? variable.query.query : variable.query;
      const labelValues = query?.match(/^label_values\((\w+),\s*(\w+)\)$/);
      if (!labelValues) continue;
      const [, metric, label] = labelValues;
      const values = await prometheus!.api<string[]>(`label/${label}/values?match[]=${encodeURIComponent(metric!)}`);
      expect(values, variable.name).toContain(NAMESPACE);
    }
  });

  it('matches scraped series, all with a namespace, with every selector of the alert rules', async () => {
    const rules = (
      parse(await readFile(ALERTS_FILE, 'utf8')) as { groups: { rules: { expr: string }[] }[] }
    ).groups.flatMap((group) => group.rules);
    const selectors = [...new Set(rules.flatMap((rule) => heraldSelectors(rule.expr)))];
    expect(selectors.length).toBeGreaterThan(0);
    for (const selector of selectors) {
      const series = await prometheus!.query(selector);
      expect(series.length, `${selector} matches no scraped series`).toBeGreaterThan(0);
      // The rules aggregate by namespace: a series without one would alert with an empty namespace.
      for (const sample of series) expect(sample.metric.namespace, selector).toBe(NAMESPACE);
    }
  });
});

/** Whether every alert rule group was last evaluated after `timeMs` (epoch milliseconds). */
async function evaluatedAfter(timeMs: number): Promise<boolean> {
  const { groups } = await prometheus!.api<{ groups: { lastEvaluation: string }[] }>('rules?type=alert');
  return groups.every((group) => Date.parse(group.lastEvaluation) > timeMs);
}
