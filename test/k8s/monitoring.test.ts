/**
 * Alerting and scraping: the PrometheusRule carries exactly the rules of deploy/prometheus/alerts.yml (the
 * file docker-compose's Prometheus loads), each alert links to its section of docs/operations.md, and the
 * ServiceMonitors find the Services and ports that serve /metrics.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { parse } from 'yaml';
import { API, DISPATCHER, find } from './objects.js';
import { REPO_ROOT, render, renderer, TARGETS } from './render.js';

const ALERTS_FILE = join(REPO_ROOT, 'deploy/prometheus/alerts.yml');
const OPERATIONS_GUIDE = join(REPO_ROOT, 'docs/operations.md');

/** The alerts the operations guide documents; more may be added. */
const REQUIRED_ALERTS = [
  'HeraldWebhookDeadLetters',
  'HeraldWebhookFailureRateHigh',
  'HeraldWebhookEndpointDisabled',
  'HeraldWebhookDeadDeliveriesWaiting',
];

/** Every metric the API and the dispatcher export (prom-client); a rule naming another one never fires. */
const KNOWN_METRICS = [
  'herald_ws_open_sockets',
  'herald_subscriptions_active',
  'herald_events_published_total',
  'herald_events_delivered_total',
  'herald_delivery_errors_total',
  'herald_event_to_send_seconds',
  'herald_webhook_attempts_total',
  'herald_webhook_delivery_seconds',
  'herald_webhook_dead_letters_total',
  'herald_webhook_retry_backlog',
  'herald_webhook_stream_lag',
  'herald_webhook_endpoints_disabled_total',
  'herald_webhook_dead_deliveries',
  'herald_webhook_disabled_endpoints',
];

const alertsFile = parse(readFileSync(ALERTS_FILE, 'utf8'));
const rules: any[] = alertsFile.groups.flatMap((group: any) => group.rules);

/** GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens. */
function anchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

describe('alert rules', () => {
  test.each(TARGETS)(`k8s/%s carries exactly the rules of deploy/prometheus/alerts.yml (${renderer.name})`, (t) => {
    expect(find(render(t), 'PrometheusRule', 'herald').spec.groups).toEqual(alertsFile.groups);
  });

  test('include the alerts the operations guide documents', () => {
    expect(rules.map((rule) => rule.alert)).toEqual(expect.arrayContaining(REQUIRED_ALERTS));
  });

  test.each(rules.filter((rule) => rule.alert))('$alert has a summary, a description and a runbook', (rule) => {
    expect(rule.labels.severity).toMatch(/^(info|warning|critical)$/);
    expect(rule.annotations.summary).toBeTruthy();
    expect(rule.annotations.description).toBeTruthy();
    const [file, fragment] = rule.annotations.runbook_url.split('#');
    expect(file).toBe('docs/operations.md');
    const headings = [...readFileSync(OPERATIONS_GUIDE, 'utf8').matchAll(/^#{1,6} (.+)$/gm)].map((m) => anchor(m[1]!));
    expect(headings).toContain(fragment);
  });

  test.each(rules)('$alert names only metrics Herald exports', (rule) => {
    const metrics = String(rule.expr).match(/\bherald_[a-z_]+\b/g) ?? [];
    expect(metrics.length).toBeGreaterThan(0);
    for (const metric of metrics) expect(KNOWN_METRICS).toContain(metric.replace(/_(bucket|sum|count)$/, ''));
  });
});

describe.each(TARGETS)(`k8s/%s ServiceMonitors (${renderer.name})`, (target) => {
  const objects = render(target);

  test.each([API, DISPATCHER])('%s: scrapes /metrics on a port its Service has', (name) => {
    const monitor = find(objects, 'ServiceMonitor', name);
    const service = find(objects, 'Service', name);
    expect(service.metadata.labels).toMatchObject(monitor.spec.selector.matchLabels);
    const servicePorts = service.spec.ports.map((port: any) => port.name);
    for (const endpoint of monitor.spec.endpoints) {
      expect(endpoint.path).toBe('/metrics');
      expect(servicePorts).toContain(endpoint.port);
    }
    // The Service must reach only this workload's pods.
    const podLabels = find(objects, 'Deployment', name).spec.template.metadata.labels;
    expect(podLabels).toMatchObject(service.spec.selector);
  });
});
