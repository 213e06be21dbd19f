import type { MigrationResult } from 'kysely';
import { describe, expect, it } from 'vitest';
import { shouldStartAgain } from './migrate.js';

// Kysely's Migrator runs without the caller's plugins, so a concurrent DROP SCHEMA can't be injected
// into a real run deterministically; the decision is pinned here, the real runs in posts.test.ts.
const droppedSchema = Object.assign(new Error('schema "another" does not exist'), { code: '3F000' });
const ran: MigrationResult[] = [{ migrationName: 'm1', direction: 'Up', status: 'Success' }];

describe('shouldStartAgain', () => {
  it('starts a run again that lost a catalog race before migrating anything', () => {
    expect(shouldStartAgain(droppedSchema, [], 1)).toBe(true);
    expect(shouldStartAgain(droppedSchema, [], 2)).toBe(true);
  });

  it('also starts again when the catalog read met a table or column dropped under it', () => {
    const droppedColumn = Object.assign(new Error('column "timestamp" of relation "kysely_migration" does not exist'), {
      code: '42703',
    });
    expect(shouldStartAgain(droppedColumn, [], 1)).toBe(true);
    expect(shouldStartAgain(Object.assign(new Error('relation gone'), { code: '42P01' }), [], 1)).toBe(true);
    expect(shouldStartAgain(droppedColumn, ran, 1)).toBe(false);
  });

  it('gives up after three attempts', () => {
    expect(shouldStartAgain(droppedSchema, [], 3)).toBe(false);
  });

  it('never repeats a run that migrated something, or failed for another reason', () => {
    expect(shouldStartAgain(droppedSchema, ran, 1)).toBe(false);
    expect(shouldStartAgain(Object.assign(new Error('syntax'), { code: '42601' }), [], 1)).toBe(false);
    expect(shouldStartAgain(new Error('no code'), [], 1)).toBe(false);
    expect(shouldStartAgain(null, [], 1)).toBe(false);
  });
});
