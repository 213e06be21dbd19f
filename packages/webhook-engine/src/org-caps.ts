import { type Database, findWebhookInFlightOverrides } from '@herald/db';
import type { Kysely } from 'kysely';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';

/** An organisation's cap is read again from the database this long after it was last read. */
export const ORG_CAP_REFRESH_MS = 10_000;
/** Organisations remembered at most (past it the least recently used is forgotten, read again when asked for). */
export const MAX_ORGS_KEPT = 10_000;

/**
 * Each organisation's `TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT`: its override in `organization_limits`
 * (set by a platform administrator), else the default. Read in batches and kept for
 * {@link ORG_CAP_REFRESH_MS}, so a changed override applies within that; a read that fails keeps the
 * last value (or the default).
 */
export interface OrgCaps {
  /** The organisation's cap (0: none); undefined until first read (the caller waits for `onChange`). */
  capOf(orgId: string): number | undefined;
}

export function createOrgCaps(options: {
  db: Kysely<Database>;
  defaultCap: number;
  /** An organisation's cap was read for the first time, or changed. */
  onChange(orgId: string): void;
  logger: Logger;
}): OrgCaps {
  const caps = new LRUCache<string, { cap: number; readAt: number }>({ max: MAX_ORGS_KEPT });
  const toRead = new Set<string>();
  let reading = false;

  async function read(): Promise<void> {
    if (reading || toRead.size === 0) return;
    reading = true;
    const orgIds = [...toRead];
    toRead.clear();
    let found: Map<string, number> | undefined;
    try {
      found = await findWebhookInFlightOverrides(options.db, orgIds);
    } catch (error) {
      options.logger.warn({ err: error }, "reading organisations' webhook in-flight overrides failed");
    }
    const readAt = Date.now();
    for (const orgId of orgIds) {
      const before = caps.peek(orgId)?.cap;
      // A failed read keeps what was known (the default for an organisation never read).
      const cap = found ? (found.get(orgId) ?? options.defaultCap) : (before ?? options.defaultCap);
      caps.set(orgId, { cap, readAt });
      if (before !== cap) options.onChange(orgId);
    }
    reading = false;
    if (toRead.size > 0) void read();
  }

  return {
    capOf(orgId) {
      const known = caps.get(orgId);
      if (!known || Date.now() - known.readAt > ORG_CAP_REFRESH_MS) {
        if (!toRead.has(orgId)) {
          toRead.add(orgId);
          queueMicrotask(() => void read());
        }
      }
      return known?.cap;
    },
  };
}
