import { createTestSchema, type TestSchema } from '@herald/testing';
import { createDatabase, type HeraldDatabase } from './create-database.js';

/*
 * The two backends Herald's data access runs on, for tests that pin the same behaviour on both:
 * PostgreSQL (a fresh schema) and embedded mode's PGlite (in memory). Not migrated: a test migrates,
 * or pins what a migration does.
 */

export interface TestBackend {
  name: 'PostgreSQL' | 'embedded PGlite';
  /** A new database on this backend, and on PostgreSQL the schema it lives in. */
  open(): Promise<{ database: HeraldDatabase; schema?: TestSchema }>;
}

/** Both backends; `databaseUrl` is read when PostgreSQL's is opened (e.g. `() => inject('databaseUrl')`). */
export function testBackends(databaseUrl: () => string): TestBackend[] {
  return [
    {
      name: 'PostgreSQL',
      open: async () => {
        const schema = await createTestSchema(databaseUrl());
        return { database: await createDatabase({ kind: 'postgres', url: schema.url }), schema };
      },
    },
    {
      name: 'embedded PGlite',
      open: async () => ({ database: await createDatabase({ kind: 'embedded', dataDir: 'memory://' }) }),
    },
  ];
}
