import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { createDatabase } from './create-database.js';

describe('embedded PGlite footprint (issue 14)', () => {
  it('runs with 16MB of shared buffers instead of the 128MB default', async () => {
    const database = await createDatabase({ kind: 'embedded', dataDir: 'memory://' });
    try {
      const { rows } = await sql<{ shared_buffers: string }>`show shared_buffers`.execute(database.db);
      expect(rows[0]?.shared_buffers).toBe('16MB');
    } finally {
      await database.close();
    }
  });

  it('creates a fresh data directory (in a worker thread, or in process where none can run) and opens it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'herald-pglite-'));
    const dataDir = join(dir, 'pgdata');
    try {
      const database = await createDatabase({ kind: 'embedded', dataDir });
      await database.ping();
      await database.close();
      expect(existsSync(join(dataDir, 'PG_VERSION'))).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
