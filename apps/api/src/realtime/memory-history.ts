import { randomUUID } from 'node:crypto';
import type { HistoryEntry, PostPublishedEventV1 } from '@herald/contracts';
import { CursorExpiredError } from '../errors.js';
import type { AppendOutcome, HistoryLimits, SubscriptionHistory } from './history.js';

interface OrgRing {
  epoch: string;
  position: number;
  /** The last `size` entries, oldest first. */
  entries: HistoryEntry[];
  /** Event id → position, for the entries still kept. */
  ids: Map<string, number>;
  expiresAt: number;
  listeners: Set<(entry: HistoryEntry) => void>;
}

/**
 * The history of one process (embedded and single-pod modes): a ring per organisation. Its epoch is
 * new for each process and whenever an organisation's ring expired, so cursors from before a restart
 * are refused rather than misread.
 */
export function createMemoryHistory(limits: HistoryLimits, now: () => number = Date.now): SubscriptionHistory {
  const rings = new Map<string, OrgRing>();

  function ringOf(orgId: string): OrgRing {
    let ring = rings.get(orgId);
    if (ring && ring.expiresAt <= now()) {
      // Expired: a fresh epoch, but live listeners stay.
      ring = { ...freshRing(), listeners: ring.listeners };
      rings.set(orgId, ring);
    }
    if (!ring) {
      ring = freshRing();
      rings.set(orgId, ring);
    }
    return ring;
  }

  function freshRing(): OrgRing {
    return {
      epoch: randomUUID().slice(0, 8),
      position: 0,
      entries: [],
      ids: new Map(),
      expiresAt: Infinity,
      listeners: new Set(),
    };
  }

  function appendOne(event: PostPublishedEventV1): HistoryEntry {
    const ring = ringOf(event.orgId);
    const known = ring.ids.get(event.eventId);
    if (known !== undefined) {
      const entry = ring.entries.find((candidate) => candidate.position === known);
      if (entry) return entry;
    }
    ring.position += 1;
    const entry: HistoryEntry = { position: ring.position, epoch: ring.epoch, event };
    ring.expiresAt = now() + limits.ttlMs;
    if (limits.size > 0) {
      ring.entries.push(entry);
      ring.ids.set(event.eventId, entry.position);
      while (ring.entries.length > limits.size) {
        const dropped = ring.entries.shift();
        if (dropped) ring.ids.delete(dropped.event.eventId);
      }
    }
    for (const listener of [...ring.listeners]) listener(entry);
    return entry;
  }

  return {
    kind: 'memory',
    enabled: limits.size > 0,
    async append(events) {
      return events.map((event): AppendOutcome => ({ ok: true, entry: appendOne(event) }));
    },
    async listen(orgId, listener) {
      const ring = ringOf(orgId);
      ring.listeners.add(listener);
      return () => {
        // The ring may have been replaced on expiry; the listener set travels with it.
        rings.get(orgId)?.listeners.delete(listener);
      };
    },
    async readAfter(orgId, epoch, position, limit = Number.POSITIVE_INFINITY) {
      const ring = ringOf(orgId);
      if (ring.epoch !== epoch) throw new CursorExpiredError('the history this cursor belongs to is gone');
      if (position > ring.position) throw new CursorExpiredError('cursor is ahead of the history');
      if (position === ring.position) return [];
      const first = ring.entries[0];
      if (!first || first.position > position + 1) throw new CursorExpiredError('cursor is older than the history');
      const start = position + 1 - first.position;
      return ring.entries.slice(start, start + limit);
    },
    async head(orgId) {
      const ring = ringOf(orgId);
      if (ring.expiresAt === Number.POSITIVE_INFINITY) ring.expiresAt = now() + limits.ttlMs;
      return { epoch: ring.epoch, position: ring.position };
    },
    async ready() {},
    async close() {
      rings.clear();
    },
  };
}
