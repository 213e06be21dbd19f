import { createDatabase, type HeraldDatabase, migrateToLatest, saveOrganizationLimits } from '@herald/db';
import { createTestSchema } from '@herald/testing';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { createOrgCaps, MAX_ORGS_KEPT, ORG_CAP_REFRESH_MS, type OrgCaps } from './org-caps.js';

// Organisations' webhook in-flight caps as a dispatcher keeps them, on a real PostgreSQL: read in
// batches, served while re-read, and at most MAX_ORGS_KEPT organisations kept.

const DEFAULT_CAP = 20;
const logger = pino({ level: 'silent' });
let database: HeraldDatabase;

beforeAll(async () => {
  const schema = await createTestSchema(inject('databaseUrl'));
  database = await createDatabase({ kind: 'postgres', url: schema.url, poolMax: 2 });
  await migrateToLatest(database.db);
});

afterAll(() => database?.close());

afterEach(() => {
  vi.useRealTimers();
});

function orgCaps(): { caps: OrgCaps; changed: string[] } {
  const changed: string[] = [];
  const caps = createOrgCaps({
    db: database.db,
    defaultCap: DEFAULT_CAP,
    onChange: (orgId) => changed.push(orgId),
    logger,
  });
  return { caps, changed };
}

async function until(what: string, check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

function capOverride(webhookAttemptsInFlight: number) {
  return {
    operationsPerSecond: null,
    publishesPerSecond: null,
    socketsPerUser: null,
    subscriptions: null,
    webhookAttemptsInFlight,
  };
}

describe('organisation caps', () => {
  it('serves the known cap while reading it again after ORG_CAP_REFRESH_MS, then the new one', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const { caps, changed } = orgCaps();
    await saveOrganizationLimits(database.db, 'org-refresh', capOverride(3));
    expect(caps.capOf('org-refresh')).toBeUndefined();
    await until('the first read', () => changed.length === 1);
    expect(caps.capOf('org-refresh')).toBe(3);

    await saveOrganizationLimits(database.db, 'org-refresh', capOverride(5));
    vi.setSystemTime(Date.now() + ORG_CAP_REFRESH_MS + 1);
    // Stale: still served while it is read again.
    expect(caps.capOf('org-refresh')).toBe(3);
    await until('the second read', () => changed.length === 2);
    expect(caps.capOf('org-refresh')).toBe(5);
  });

  it('past MAX_ORGS_KEPT forgets the least recently used organisation, not one used since', async () => {
    const { caps, changed } = orgCaps();
    const orgs = Array.from({ length: MAX_ORGS_KEPT }, (_, i) => `org-kept-${i}`);
    for (const orgId of orgs) caps.capOf(orgId);
    await until('every cap read', () => changed.length === MAX_ORGS_KEPT);
    // The first organisation is used again: the second is now the least recently used.
    expect(caps.capOf('org-kept-0')).toBe(DEFAULT_CAP);

    expect(caps.capOf('org-kept-new')).toBeUndefined();
    await until('the new cap read', () => changed.includes('org-kept-new'));
    expect(caps.capOf('org-kept-new')).toBe(DEFAULT_CAP);
    expect(caps.capOf('org-kept-0')).toBe(DEFAULT_CAP);
    expect(caps.capOf('org-kept-2')).toBe(DEFAULT_CAP);
    // Forgotten: unknown again until read again.
    expect(caps.capOf('org-kept-1')).toBeUndefined();
    await until('the forgotten cap read again', () => changed.filter((orgId) => orgId === 'org-kept-1').length === 2);
  });
});
