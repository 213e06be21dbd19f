import { serverAudits } from 'graphql-http';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from './testing/test-api.js';

// The GraphQL-over-HTTP audit that graphql-http ships, against the real server over a real socket.
// Every MUST must pass; SHOULD/MAY results are printed so regressions are visible.

let api: TestApi;
const results: Array<{ name: string; status: string; reason?: string }> = [];

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl'), listen: true });
});

afterAll(async () => {
  const summary = results.reduce<Record<string, number>>((counts, { name, status }) => {
    const key = `${name.split(' ')[0]} ${status}`;
    counts[key] = (counts[key] ?? 0) + 1;
    return counts;
  }, {});
  console.info('graphql-http audit:', JSON.stringify(summary));
  for (const result of results.filter((r) => r.status !== 'ok')) {
    console.info(`  ${result.status}: ${result.name}${result.reason ? ` — ${result.reason}` : ''}`);
  }
  await api.close();
});

describe('graphql-http server audits', () => {
  const audits = serverAudits({ url: () => `${api.baseUrl}/graphql` });
  it('has MUST audits to run', () => {
    expect(audits.filter((audit) => audit.name.startsWith('MUST')).length).toBeGreaterThan(10);
  });

  for (const audit of audits) {
    it(audit.name, async () => {
      const result = await audit.fn();
      results.push({ name: audit.name, status: result.status, reason: 'reason' in result ? result.reason : undefined });
      if (audit.name.startsWith('MUST')) {
        expect(result.status, 'reason' in result ? result.reason : '').toBe('ok');
      }
    });
  }
});
