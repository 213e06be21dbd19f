// Statements PGlite runs per `publishPost` in embedded mode (PGlite costs ~180–280 µs per
// statement), across the publish, the history (relay or direct append; the publish marks it) and the in-process webhook
// engine. Counts every PGlite `query`/`exec` call in this process while N posts are published one after
// another, then subtracts what the same process runs idle for as long (the relay's and engine's polls).
// Usage: node --import tsx bench/micro/pglite-statements.ts [posts=200]
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '../..');
const fromDb = createRequire(join(root, 'packages/db/package.json'));
// The ESM build (what packages/db imports), not the CommonJS one `require.resolve` names.
const esm = fromDb.resolve('@electric-sql/pglite').replace(/index\.cjs$/, 'index.js');
const { PGlite } = (await import(pathToFileURL(esm).href)) as {
  PGlite: { prototype: Record<string, (...args: unknown[]) => unknown> };
};

let counting = false;
const statements = new Map<string, number>();
for (const method of ['query', 'exec'] as const) {
  // The methods live on a base class of PGlite: patch the prototype that owns each.
  let owner: Record<string, unknown> | null = PGlite.prototype;
  while (owner && !Object.hasOwn(owner, method)) owner = Object.getPrototypeOf(owner);
  if (!owner) throw new Error(`PGlite has no ${method}`);
  const original = owner[method] as (...args: unknown[]) => unknown;
  owner[method] = function (this: unknown, ...args: unknown[]) {
    if (counting) {
      const key = String(args[0]).replace(/\s+/g, ' ').trim().slice(0, 70);
      statements.set(key, (statements.get(key) ?? 0) + 1);
    }
    return original.apply(this, args);
  };
}

// Statements run as named prepared statements (packages/db pglite-prepared-statements.ts) do not go
// through `query`'s prototype method: count each Bind of a named statement, by the text it was parsed from.
{
  const named = new Map<string, string>();
  const decoder = new TextDecoder();
  const cString = (bytes: Uint8Array, from: number) => {
    const end = bytes.indexOf(0, from);
    return [decoder.decode(bytes.subarray(from, end)), end + 1] as const;
  };
  let owner: Record<string, unknown> | null = PGlite.prototype;
  while (owner && !Object.hasOwn(owner, 'execProtocolRawSync')) owner = Object.getPrototypeOf(owner);
  if (!owner) throw new Error('PGlite has no execProtocolRawSync');
  const original = owner.execProtocolRawSync as (...args: unknown[]) => unknown;
  owner.execProtocolRawSync = function (this: unknown, ...args: unknown[]) {
    const message = args[0] as Uint8Array;
    const type = String.fromCharCode(message[0] ?? 0);
    if (type === 'P') {
      const [name, next] = cString(message, 5);
      if (name) named.set(name, cString(message, next)[0]);
    } else if (type === 'B' && counting) {
      const [statement] = cString(message, cString(message, 5)[1]);
      const text = statement ? named.get(statement) : undefined;
      if (text !== undefined) {
        const key = text.replace(/\s+/g, ' ').trim().slice(0, 70);
        statements.set(key, (statements.get(key) ?? 0) + 1);
      }
    }
    return original.apply(this, args);
  };
}

const { startTestApi } = (await import(pathToFileURL(join(root, 'apps/api/src/testing/test-api.ts')).href)) as {
  startTestApi: typeof import('../../apps/api/src/testing/test-api.js').startTestApi;
};

const posts = Number(process.argv[2] ?? 200);
const api = await startTestApi({});
const token = await api.token({ sub: 'writer', name: 'Writer', orgs: ['org-s'] });
const create = async (title: string) => {
  const created = await api.graphql(
    'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
    { input: { orgId: 'org-s', title, tags: [] } },
    token,
  );
  return created.body.data.createPost.id as string;
};
const publish = async (id: string) => {
  const published = await api.graphql('mutation($id: ID!) { publishPost(id: $id) { id } }', { id }, token);
  if (published.body.errors) throw new Error(JSON.stringify(published.body.errors));
};
const settle = () => new Promise((resolve) => setTimeout(resolve, 1_500));
const total = () => [...statements.values()].reduce((sum, n) => sum + n, 0);

for (let i = 0; i < 20; i++) await publish(await create(`warm ${i}`));
const drafts: string[] = [];
for (let i = 0; i < posts; i++) drafts.push(await create(`post ${i}`));
await settle();

// Idle for as long as the publishing phase takes: what the background polls cost on their own.
counting = true;
let started = performance.now();
const cpuStart = process.cpuUsage();
// One request per macrotask, as from a socket (in-process calls on PGlite would never yield to timers).
for (const id of drafts) {
  await publish(id);
  await new Promise((resolve) => setImmediate(resolve));
}
await settle();
const busyMs = performance.now() - started;
const cpu = process.cpuUsage(cpuStart);
counting = false;
const published = new Map(statements);
const publishedTotal = total();
statements.clear();
counting = true;
started = performance.now();
await new Promise((resolve) => setTimeout(resolve, busyMs));
counting = false;
const idleTotal = total();

console.log(`posts published one after another: ${posts}`);
console.log(`statements while publishing (incl. 1.5 s settle): ${publishedTotal} in ${busyMs.toFixed(0)} ms`);
console.log(`statements idle for as long: ${idleTotal}`);
console.log(`statements per publishPost: ${((publishedTotal - idleTotal) / posts).toFixed(2)}`);
console.log(
  `process CPU per publishPost (incl. HTTP, GraphQL, settle polls): ${((cpu.user + cpu.system) / 1000 / posts).toFixed(2)} ms`,
);
console.log('by statement (while publishing):');
for (const [key, count] of [...published.entries()].sort((a, b) => b[1] - a[1]).slice(0, 15))
  console.log(`  ${String(count).padStart(6)}  ${key}`);
const { rows } = (await api.app.database.db.executeQuery({
  sql: 'select count(*)::int as pending from webhook_outbox where historied_at is null',
  parameters: [],
  query: { kind: 'RawNode' },
} as never)) as { rows: Array<{ pending: number }> };
console.log(`outbox events not marked historied at the end: ${rows[0]?.pending}`);
await api.close();
