/**
 * What a cache lookup costs on the hot paths that keep one, hand-made on a Map against `lru-cache`:
 * ns of CPU per hit, same process, no I/O.
 * - accepted queries (plugins/use-compiled-execution.ts): one lookup by query text per fast-path request;
 * - Accept verdicts (http-fast-path.ts): one lookup by `Accept` header per fast-path request;
 * - HMAC keys (packages/webhooks/src/hmac-keys.ts): one lookup per signed delivery, a hit refreshes
 *   recency (Map: delete + set; lru-cache: get with a TTL refreshed on use).
 *   node --import tsx bench/micro/cache-micro.ts [iterations=2000000]
 */
import { LRUCache } from 'lru-cache';

const iterations = Number(process.argv[2] ?? 2_000_000);

function measure(name: string, one: (i: number) => unknown): number {
  for (let i = 0; i < Math.min(iterations, 100_000); i++) one(i); // warm-up: let V8 optimise first
  const c0 = process.cpuUsage();
  let sink = 0;
  for (let i = 0; i < iterations; i++) sink += one(i) ? 1 : 0;
  const cpu = process.cpuUsage(c0);
  const ns = ((cpu.user + cpu.system) * 1000) / iterations;
  console.log(`${name.padEnd(52)} ${ns.toFixed(1).padStart(7)} ns CPU each${sink < 0 ? '!' : ''}`);
  return ns;
}

// 500 query texts of ~300 characters, requests cycling over the 20 hottest.
const queries = Array.from(
  { length: 500 },
  (_, i) => `query Q${i}($id: ID!) { post(id: $id) { id title ${'body '.repeat(50)} } }`,
);
const hot = queries.slice(0, 20).map((query) => `${query}`.slice(0)); // equal texts, other string objects
const acceptedMap = new Map<string, object>();
const acceptedLru = new LRUCache<string, object>({ max: 500 });
for (const query of queries) {
  acceptedMap.set(query, { query });
  acceptedLru.set(query, { query });
}
console.log(`accepted queries (500 kept, 20 hot), ${iterations} lookups`);
measure('  Map.get', (i) => acceptedMap.get(hot[i % 20] as string));
measure('  LRUCache.get', (i) => acceptedLru.get(hot[i % 20] as string));

const accepts = ['application/json', '*/*', 'application/graphql-response+json, application/json;q=0.9', 'text/html'];
const verdictMap = new Map<string, boolean>();
const verdictLru = new LRUCache<string, boolean>({ max: 1_000 });
for (const accept of accepts) {
  verdictMap.set(accept, true);
  verdictLru.set(accept, true);
}
console.log(`Accept verdicts (4 kept), ${iterations} lookups`);
measure('  Map.get', (i) => verdictMap.get(accepts[i & 3] as string));
measure('  LRUCache.get', (i) => verdictLru.get(accepts[i & 3] as string));

const secrets = Array.from({ length: 3 }, (_, i) => `whsec_${String(i).repeat(43)}`);
const keysMap = new Map<string, { keys: object; usedAt: number }>();
const keysLru = new LRUCache<string, object>({
  max: 10_000,
  ttl: 600_000,
  updateAgeOnGet: true,
  allowStale: true,
  ttlResolution: 0,
});
const FRESH_ONLY = { allowStale: false } as const;
for (const secret of secrets) {
  keysMap.set(secret, { keys: {}, usedAt: 0 });
  keysLru.set(secret, {});
}
console.log(`HMAC keys (3 secrets), ${iterations} lookups`);
measure('  Map: oldest check + get + delete + set', (i) => {
  const secret = secrets[i % 3] as string;
  const now = performance.now();
  const oldest = keysMap.keys().next().value;
  if (oldest !== undefined && oldest !== secret) {
    const entry = keysMap.get(oldest);
    if (entry && now - entry.usedAt > 600_000) keysMap.delete(oldest);
  }
  const cached = keysMap.get(secret);
  if (!cached) return undefined;
  keysMap.delete(secret);
  cached.usedAt = now;
  keysMap.set(secret, cached);
  return cached.keys;
});
measure('  LRUCache: oldest check + get (ttl, updateAgeOnGet)', (i) => {
  const secret = secrets[i % 3] as string;
  for (const oldest of keysLru.rkeys()) {
    if (oldest !== secret && keysLru.getRemainingTTL(oldest) < 0) keysLru.delete(oldest);
    break;
  }
  return keysLru.get(secret, FRESH_ONLY);
});
