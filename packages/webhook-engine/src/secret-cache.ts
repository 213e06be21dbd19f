import { openSecret, type SecretKeyring } from '@herald/db';

/**
 * Opened signing secrets, kept in memory so the signing path decrypts each sealed secret once, not
 * per delivery. Keyed by the envelope itself: a rotation or a re-encryption stores a new envelope,
 * which is simply a new entry, so nothing is ever stale. An entry is also bound to its endpoint: the
 * same envelope presented for another endpoint is opened again (and fails, the endpoint being the
 * associated data).
 *
 * Bounded: at most `maxEntries` plaintexts, each kept at most `ttlMs` after it was opened (entries
 * past it are dropped as the cache is used). `bench/micro/secret-cache-micro.ts` measures a hit against
 * an open. Not on lru-cache, unlike the other caches: a plaintext secret must leave memory once its TTL is
 * over, and lru-cache drops a stale entry only when it is read again (or on a full `purgeStale` scan, or
 * with a timer per entry); with one TTL for all, insertion order is expiry order, so each use drops the
 * expired ones from the front at the cost of one comparison.
 */

/** How long an opened secret stays in memory. */
export const SECRET_CACHE_TTL_MS = 5 * 60_000;
/** Opened secrets kept at most (one or two per endpoint being delivered to). */
export const SECRET_CACHE_MAX_ENTRIES = 10_000;

export interface SecretCacheOptions {
  keyring: SecretKeyring;
  /** @default {@link SECRET_CACHE_TTL_MS} */
  ttlMs?: number;
  /** @default {@link SECRET_CACHE_MAX_ENTRIES} */
  maxEntries?: number;
  /** Clock in ms. @default performance.now */
  now?: () => number;
}

export interface SecretCache {
  /**
   * The plaintexts of an endpoint's sealed secrets, in the same order.
   * @throws SecretUnreadableError when one does not open with the keyring
   */
  open(endpointId: string, sealed: readonly string[]): string[];
  /** Entries held now. */
  readonly size: number;
  /** Forgets every opened secret (at stop). */
  clear(): void;
}

interface Entry {
  endpointId: string;
  plaintext: string;
  expiresAt: number;
}

export function createSecretCache(options: SecretCacheOptions): SecretCache {
  const { keyring } = options;
  const ttlMs = options.ttlMs ?? SECRET_CACHE_TTL_MS;
  const maxEntries = options.maxEntries ?? SECRET_CACHE_MAX_ENTRIES;
  const now = options.now ?? (() => performance.now());
  // Insertion order is expiry order (one TTL for all, entries never refreshed): the oldest is first.
  const entries = new Map<string, Entry>();

  function dropExpired(at: number): void {
    for (const [envelope, entry] of entries) {
      if (entry.expiresAt > at) return;
      entries.delete(envelope);
    }
  }

  function openOne(endpointId: string, envelope: string, at: number): string {
    const cached = entries.get(envelope);
    if (cached !== undefined && cached.endpointId === endpointId && cached.expiresAt > at) return cached.plaintext;
    const plaintext = openSecret(keyring, endpointId, envelope);
    entries.delete(envelope);
    if (entries.size >= maxEntries) entries.delete(entries.keys().next().value as string);
    entries.set(envelope, { endpointId, plaintext, expiresAt: at + ttlMs });
    return plaintext;
  }

  return {
    open(endpointId, sealed) {
      const at = now();
      dropExpired(at);
      const opened = new Array<string>(sealed.length);
      for (let i = 0; i < sealed.length; i++) opened[i] = openOne(endpointId, sealed[i] as string, at);
      return opened;
    },
    get size() {
      return entries.size;
    },
    clear() {
      entries.clear();
    },
  };
}
