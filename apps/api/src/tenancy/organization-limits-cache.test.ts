import { createDatabase, type HeraldDatabase, migrateToLatest, saveOrganizationLimits } from '@herald/db';
import { createTestSchema } from '@herald/testing';
import type { KyselyPlugin } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  createOrganizationLimitsCache,
  LIMITS_CACHE_MAX_ENTRIES,
  LIMITS_CACHE_TTL_MS,
} from './organization-limits-cache.js';
import type { TenantLimitOverrides, TenantLimits } from './quotas.js';

// The organisation limits cache on a real PostgreSQL: how long it keeps an organisation's limits, how
// many organisations it keeps, and that a failed read is answered with the defaults and not kept.

const DEFAULTS: TenantLimits = {
  operationsPerSecond: 100,
  publishesPerSecond: 10,
  socketsPerUser: 5,
  subscriptions: 50,
  webhookAttemptsInFlight: 20,
};
const OVERRIDE: TenantLimitOverrides = {
  operationsPerSecond: 7,
  publishesPerSecond: null,
  socketsPerUser: null,
  subscriptions: null,
  webhookAttemptsInFlight: null,
};

const databases: HeraldDatabase[] = [];
let database: HeraldDatabase;
/** SELECTs sent through `counted` (each read of the cache is one). */
let selects = 0;
const counting: KyselyPlugin = {
  transformQuery(args) {
    if (args.node.kind === 'SelectQueryNode') selects++;
    return args.node;
  },
  transformResult: async (args) => args.result,
};

/** A database on a schema of its own, without tables until migrated. */
async function emptyDatabase(): Promise<HeraldDatabase> {
  const schema = await createTestSchema(inject('databaseUrl'));
  const created = await createDatabase({ kind: 'postgres', url: schema.url, poolMax: 10 });
  databases.push(created);
  return created;
}

beforeAll(async () => {
  database = await emptyDatabase();
  await migrateToLatest(database.db);
});

afterAll(() => Promise.all(databases.map((created) => created.close())));

/** A cache with a clock the test moves (a real clock's value, never 0). */
function cacheWithClock(
  onError: (error: unknown) => void = (error) => expect.fail(String(error)),
  on: HeraldDatabase = database,
) {
  const clock = { now: 1_000_000 };
  const cache = createOrganizationLimitsCache({
    db: on.db.withPlugin(counting),
    defaults: DEFAULTS,
    onError,
    now: () => clock.now,
  });
  return { cache, clock };
}

describe('organisation limits cache', () => {
  it('answers the defaults when the read fails, and does not keep them: the next check reads again', async () => {
    // No table yet: the read fails.
    const failing = await emptyDatabase();
    const errors: unknown[] = [];
    const { cache } = cacheWithClock((error) => errors.push(error), failing);
    expect(await cache.limitsOf('org-failed')).toEqual(DEFAULTS);
    expect(errors).toHaveLength(1);

    await migrateToLatest(failing.db);
    await saveOrganizationLimits(failing.db, 'org-failed', OVERRIDE);
    // Same instant: a kept answer would still be the defaults.
    expect((await cache.limitsOf('org-failed')).operationsPerSecond).toBe(7);
    expect(errors).toHaveLength(1);
  });

  it('shares one query between concurrent misses, and keeps the answer for LIMITS_CACHE_TTL_MS', async () => {
    const { cache, clock } = cacheWithClock();
    selects = 0;
    const answers = await Promise.all(Array.from({ length: 20 }, () => cache.limitsOf('org-ttl')));
    expect(answers.every((answer) => answer.operationsPerSecond === DEFAULTS.operationsPerSecond)).toBe(true);
    expect(selects).toBe(1);

    // Changed on "another pod": this one keeps what it read until the TTL is over.
    await saveOrganizationLimits(database.db, 'org-ttl', OVERRIDE);
    clock.now += LIMITS_CACHE_TTL_MS - 1;
    expect((await cache.limitsOf('org-ttl')).operationsPerSecond).toBe(DEFAULTS.operationsPerSecond);
    expect(selects).toBe(1);
    clock.now += 2;
    expect((await cache.limitsOf('org-ttl')).operationsPerSecond).toBe(7);
    expect(selects).toBe(2);
  });

  it('uses limits saved on this pod at once', async () => {
    const { cache } = cacheWithClock();
    expect((await cache.limitsOf('org-saved')).operationsPerSecond).toBe(DEFAULTS.operationsPerSecond);
    await cache.save('org-saved', OVERRIDE);
    expect((await cache.limitsOf('org-saved')).operationsPerSecond).toBe(7);
  });

  it('past LIMITS_CACHE_MAX_ENTRIES forgets the least recently used organisation, not one used since', async () => {
    const { cache } = cacheWithClock();
    const orgs = Array.from({ length: LIMITS_CACHE_MAX_ENTRIES }, (_, i) => `org-bound-${i}`);
    for (let i = 0; i < orgs.length; i += 100) {
      await Promise.all(orgs.slice(i, i + 100).map((orgId) => cache.limitsOf(orgId)));
    }
    // Overrides stored behind the cache's back: an organisation read again answers 7, a kept one the defaults.
    await saveOrganizationLimits(database.db, 'org-bound-0', OVERRIDE);
    await saveOrganizationLimits(database.db, 'org-bound-1', OVERRIDE);
    // The first organisation read is used again: the second is now the least recently used.
    expect((await cache.limitsOf('org-bound-0')).operationsPerSecond).toBe(DEFAULTS.operationsPerSecond);

    selects = 0;
    await cache.limitsOf('org-bound-new');
    expect(selects).toBe(1);
    expect((await cache.limitsOf('org-bound-0')).operationsPerSecond).toBe(DEFAULTS.operationsPerSecond);
    expect(selects).toBe(1);
    expect((await cache.limitsOf('org-bound-1')).operationsPerSecond).toBe(7);
    expect(selects).toBe(2);
  });
});
