import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { ALERTS_FILE, ALERTS_TEST_FILE, PROMETHEUS_CONFIG, promtool } from './support/prometheus.js';

// The shipped alert rules checked by Prometheus's own tool: the rule file and the scrape config parse,
// and the unit tests in deploy/prometheus/alerts.test.yml pass. Those unit tests are then checked
// themselves: for every alert, a rule that never fires and a rule that fires for every namespace must
// each make them fail, so each alert has a case where it must fire and a case where it must stay silent.

interface AlertRule {
  alert: string;
  expr: string;
}
interface RuleFile {
  groups: { name: string; rules: AlertRule[] }[];
}
interface RuleTests {
  rule_files: string[];
  tests: { alert_rule_test?: { alertname: string; exp_alerts: unknown[] }[] }[];
}

const ruleFile = parse(await readFile(ALERTS_FILE, 'utf8')) as RuleFile;
const alerts = ruleFile.groups.flatMap((group) => group.rules).filter((rule) => rule.alert);

/** Never returns a sample: an alert with this expression never fires. */
const NEVER = 'vector(0) > 1';
/** One sample per namespace that has any Herald series: an alert with this expression fires everywhere. */
const EVERYWHERE = 'max by (namespace) ({__name__=~"herald_.+"})';

/** One failed `alert_rule_test` of promtool's report: the alert, and how many alerts were expected and got. */
interface Failure {
  alertname: string;
  expected: number;
  got: number;
}

/**
 * Reads promtool's failure report: blocks of `alertname: X, time: T,` then `exp:[…]` and `got:[…]`, each
 * alert listed with a `Labels:` line.
 */
function failures(output: string): Failure[] {
  return output
    .split(/\n\s*alertname: /)
    .slice(1)
    .map((block) => {
      const [expected = '', got = ''] = block.split(/\bgot:/);
      const count = (text: string) => text.match(/Labels:/g)?.length ?? 0;
      return { alertname: block.slice(0, block.indexOf(',')), expected: count(expected), got: count(got) };
    });
}

/** Runs the shipped unit tests against alerts.yml with `alertname`'s expression replaced by `expr`. */
async function testRulesWith(alertname: string, expr: string): Promise<Failure[]> {
  const dir = await mkdtemp(join(tmpdir(), 'herald-rules-'));
  try {
    const mutated = structuredClone(ruleFile);
    for (const rule of mutated.groups.flatMap((group) => group.rules)) if (rule.alert === alertname) rule.expr = expr;
    // The unit tests name their rule file relative to themselves.
    await writeFile(join(dir, basename(ALERTS_FILE)), stringify(mutated));
    await copyFile(ALERTS_TEST_FILE, join(dir, basename(ALERTS_TEST_FILE)));
    const result = await promtool(['test', 'rules', basename(ALERTS_TEST_FILE)], dir);
    expect(result.code, result.output).not.toBe(0);
    return failures(result.output);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('deploy/prometheus/alerts.yml', () => {
  it('passes promtool check rules', async () => {
    const result = await promtool(['check', 'rules', ALERTS_FILE]);
    expect(result.code, result.output).toBe(0);
    expect(result.output).toContain(`SUCCESS: ${alerts.length} rules found`);
  });

  it('passes its unit tests (promtool test rules deploy/prometheus/alerts.test.yml)', async () => {
    const result = await promtool(['test', 'rules', ALERTS_TEST_FILE]);
    expect(result.code, result.output).toBe(0);
    expect(result.output).toContain('SUCCESS');
  });

  it('has unit tests that load it and expect every alert both firing and silent', async () => {
    const tests = parse(await readFile(ALERTS_TEST_FILE, 'utf8')) as RuleTests;
    expect(tests.rule_files).toEqual([basename(ALERTS_FILE)]);
    const cases = tests.tests.flatMap((group) => group.alert_rule_test ?? []);
    for (const { alert } of alerts) {
      const mine = cases.filter((entry) => entry.alertname === alert);
      expect(
        mine.some((entry) => entry.exp_alerts.length > 0),
        `${alert} never expected to fire`,
      ).toBe(true);
      expect(
        mine.some((entry) => entry.exp_alerts.length === 0),
        `${alert} never expected silent`,
      ).toBe(true);
    }
  });

  describe.each(alerts)('$alert', ({ alert }) => {
    it('a rule that never fires fails a unit test that expects it to', async () => {
      const failed = await testRulesWith(alert, NEVER);
      expect(failed.length).toBeGreaterThan(0);
      expect(failed.every((failure) => failure.alertname === alert)).toBe(true);
      expect(failed.some((failure) => failure.got < failure.expected)).toBe(true);
    });

    it('a rule that fires for every namespace fails a unit test that expects it silent', async () => {
      const failed = await testRulesWith(alert, EVERYWHERE);
      expect(failed.length).toBeGreaterThan(0);
      expect(failed.every((failure) => failure.alertname === alert)).toBe(true);
      expect(failed.some((failure) => failure.got > failure.expected)).toBe(true);
    });
  });
});

describe('deploy/prometheus/prometheus.yml', () => {
  it('is valid Prometheus configuration syntax', async () => {
    const result = await promtool(['check', 'config', '--syntax-only', PROMETHEUS_CONFIG]);
    expect(result.code, result.output).toBe(0);
  });

  it('passes promtool check config with its rule files where docker-compose mounts them', async () => {
    // Compose mounts deploy/prometheus/<file> at /etc/prometheus/<file> (test/deploy checks the mounts).
    const config = parse(await readFile(PROMETHEUS_CONFIG, 'utf8')) as { rule_files: string[] };
    expect(config.rule_files).toEqual([`/etc/prometheus/${basename(ALERTS_FILE)}`]);
    config.rule_files = config.rule_files.map((file) => join(dirname(ALERTS_FILE), basename(file)));
    const dir = await mkdtemp(join(tmpdir(), 'herald-prometheus-config-'));
    try {
      const copy = join(dir, 'prometheus.yml');
      await writeFile(copy, stringify(config));
      const result = await promtool(['check', 'config', copy]);
      expect(result.code, result.output).toBe(0);
      expect(result.output).toContain(`SUCCESS: ${alerts.length} rules found`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
