import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';

const SET = `mutation($orgId: ID!, $limits: OrganizationLimitsInput!) {
  setOrganizationLimits(orgId: $orgId, limits: $limits) {
    webhookAttemptsInFlight operationsPerSecond overrides { webhookAttemptsInFlight operationsPerSecond }
  }
}`;
const GET = `query($orgId: ID!) {
  organizationLimits(orgId: $orgId) { webhookAttemptsInFlight overrides { webhookAttemptsInFlight } }
}`;
const USAGE = `query($orgId: ID!) {
  organizationUsage(orgId: $orgId) { webhookAttemptsInFlight limits { webhookAttemptsInFlight } }
}`;

let api: TestApi;
let admin: string;
let member: string;

beforeAll(async () => {
  // No Redis: the in-process dispatcher, whose count organizationUsage reports.
  api = await startTestApi({
    databaseUrl: inject('databaseUrl'),
    env: { TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT: '40' },
  });
  admin = await api.token({ sub: 'operator', roles: ['herald:admin'] });
  member = await api.token({ sub: 'member', orgs: ['org-hooks'] });
});

afterAll(() => api.close());

const stored = async (orgId: string) =>
  (
    await api.app.database.db
      .selectFrom('organization_limits')
      .select('webhook_attempts_in_flight')
      .where('org_id', '=', orgId)
      .executeTakeFirst()
  )?.webhook_attempts_in_flight;

describe('webhookAttemptsInFlight per organisation', () => {
  it('is set by a platform administrator, stored where the dispatchers read it, and returned to the default with null', async () => {
    const set = await api.graphql(SET, { orgId: 'org-hooks', limits: { webhookAttemptsInFlight: 3 } }, admin);
    expect(set.body.errors).toBeUndefined();
    expect(set.body.data.setOrganizationLimits).toEqual({
      webhookAttemptsInFlight: 3,
      operationsPerSecond: 1000,
      overrides: { webhookAttemptsInFlight: 3, operationsPerSecond: null },
    });
    expect(await stored('org-hooks')).toBe(3);
    // Setting another quota keeps it.
    await api.graphql(SET, { orgId: 'org-hooks', limits: { operationsPerSecond: 5 } }, admin);
    expect(await stored('org-hooks')).toBe(3);
    const usage = await api.graphql(USAGE, { orgId: 'org-hooks' }, member);
    expect(usage.body.errors).toBeUndefined();
    expect(usage.body.data.organizationUsage).toEqual({
      webhookAttemptsInFlight: 0,
      limits: { webhookAttemptsInFlight: 3 },
    });

    await api.graphql(SET, { orgId: 'org-hooks', limits: { webhookAttemptsInFlight: null } }, admin);
    const read = await api.graphql(GET, { orgId: 'org-hooks' }, admin);
    expect(read.body.data.organizationLimits).toEqual({
      webhookAttemptsInFlight: 40,
      overrides: { webhookAttemptsInFlight: null },
    });
    expect(await stored('org-hooks')).toBeNull();
  });

  it('refuses a negative or fractional value with BAD_USER_INPUT, changing nothing', async () => {
    await api.graphql(SET, { orgId: 'org-hooks-bad', limits: { webhookAttemptsInFlight: 7 } }, admin);
    for (const value of [-1, 10_000_001]) {
      const { body } = await api.graphql(
        SET,
        { orgId: 'org-hooks-bad', limits: { webhookAttemptsInFlight: value } },
        admin,
      );
      expect(body.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT');
    }
    expect(
      (await api.graphql(SET, { orgId: 'org-hooks-bad', limits: { webhookAttemptsInFlight: 1.5 } }, admin)).body.errors,
    ).toBeDefined();
    expect(await stored('org-hooks-bad')).toBe(7);
  });

  it('is not set by a member', async () => {
    const { body } = await api.graphql(SET, { orgId: 'org-hooks', limits: { webhookAttemptsInFlight: 1 } }, member);
    expect(body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN');
  });
});
