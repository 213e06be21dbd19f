// Where embedded mode's CPU goes per `publishPost` on PGlite: the synchronous time PGlite spends
// inside WebAssembly per statement (every `execProtocolRawSync` call, attributed to the SQL it runs), and the
// whole process's CPU per publish, with N publishes in flight at once (as the bench's 64 connections) on a
// data directory on disk (as `pnpm start`; `memory://` with --memory).
// With --endpoint, the organisation has a webhook endpoint (a local receiver answering 200), so each
// event is also fanned out, claimed, POSTed and recorded by the in-process engine.
// Usage: node --import tsx bench/micro/pglite-publish-cost.ts [posts=1000] [concurrency=64] [--memory] [--endpoint]
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '../..');
const fromDb = createRequire(join(root, 'packages/db/package.json'));
const esm = fromDb.resolve('@electric-sql/pglite').replace(/index\.cjs$/, 'index.js');
const { PGlite } = (await import(pathToFileURL(esm).href)) as {
  PGlite: { prototype: Record<string, (...args: unknown[]) => unknown> };
};

const args = process.argv.slice(2).filter((arg) => !arg.startsWith('--'));
const posts = Number(args[0] ?? 1000);
const concurrency = Number(args[1] ?? 64);
const inMemory = process.argv.includes('--memory');
const withEndpoint = process.argv.includes('--endpoint');

let counting = false;
/** The statement the wasm calls belong to: the last Parse or simple Query message seen. */
let current = '?';
const syncMs = new Map<string, { ms: number; calls: number; statements: number }>();
const decoder = new TextDecoder();
/** Named prepared statements (packages/db pglite-prepared-statements.ts): name → text. */
const named = new Map<string, string>();
function statementOf(message: Uint8Array): string | undefined {
  const type = String.fromCharCode(message[0] ?? 0);
  if (type === 'Q') return decoder.decode(message.subarray(5, message.indexOf(0, 5)));
  if (type === 'P') {
    const nameEnd = message.indexOf(0, 5);
    const text = decoder.decode(message.subarray(nameEnd + 1, message.indexOf(0, nameEnd + 1)));
    if (nameEnd > 5) named.set(decoder.decode(message.subarray(5, nameEnd)), text);
    return text;
  }
  if (type === 'B') {
    // Bind: portal name, then statement name; a named statement runs without a Parse.
    const portalEnd = message.indexOf(0, 5);
    const name = decoder.decode(message.subarray(portalEnd + 1, message.indexOf(0, portalEnd + 1)));
    if (name) return named.get(name) ?? `(prepared ${name})`;
  }
  return undefined;
}
let owner: Record<string, unknown> | null = PGlite.prototype;
// Named statements are parsed before counting starts (warm-up): record their names all along.
while (owner && !Object.hasOwn(owner, 'execProtocolRawSync')) owner = Object.getPrototypeOf(owner);
if (!owner) throw new Error('PGlite has no execProtocolRawSync');
const original = owner.execProtocolRawSync as (...args: unknown[]) => unknown;
owner.execProtocolRawSync = function (this: unknown, ...callArgs: unknown[]) {
  const text = statementOf(callArgs[0] as Uint8Array);
  if (!counting) return original.apply(this, callArgs);
  if (text !== undefined) current = text.replace(/\s+/g, ' ').trim().slice(0, 80);
  // CPU, not wall time: the machine is shared, and a blocking fsync inside PGlite is not CPU either.
  const started = process.cpuUsage();
  try {
    return original.apply(this, callArgs);
  } finally {
    const used = process.cpuUsage(started);
    const entry = syncMs.get(current) ?? { ms: 0, calls: 0, statements: 0 };
    entry.ms += (used.user + used.system) / 1000;
    entry.calls += 1;
    if (text !== undefined) entry.statements += 1;
    syncMs.set(current, entry);
  }
};

const { startTestApi } = (await import(pathToFileURL(join(root, 'apps/api/src/testing/test-api.ts')).href)) as {
  startTestApi: typeof import('../../apps/api/src/testing/test-api.js').startTestApi;
};
const dataDir = inMemory ? 'memory://' : mkdtempSync(join(tmpdir(), 'herald-pglite-cost-'));
const api = await startTestApi({
  env: { HERALD_DATA_DIR: dataDir, NODE_ENV: 'production', WEBHOOK_ALLOW_PRIVATE_URLS: 'true' },
  listen: true,
});
const token = await api.token({ sub: 'writer', name: 'Writer', orgs: ['org-s'] });
const post = async (query: string, variables: Record<string, unknown>) => {
  const response = await fetch(`${api.baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = (await response.json()) as { data?: any; errors?: unknown };
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
};
const create = async (title: string) =>
  (
    await post('mutation($input: CreatePostInput!) { createPost(input: $input) { id } }', {
      input: { orgId: 'org-s', title, tags: ['a'] },
    })
  ).createPost.id as string;
const publish = (id: string) => post('mutation($id: ID!) { publishPost(id: $id) { id } }', { id });
const inParallel = async <T>(items: T[], work: (item: T) => Promise<unknown>) => {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) await work(items[next++]!);
    }),
  );
};

let received = 0;
const receiver = createServer((request, response) => {
  request.resume();
  request.on('end', () => {
    received++;
    response.end();
  });
});
if (withEndpoint) {
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  await post(
    'mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }',
    { input: { orgId: 'org-s', url, eventTypes: ['post.published'] } },
  );
}
const warm = await Promise.all(Array.from({ length: 50 }, (_, i) => create(`warm ${i}`)));
await inParallel(warm, publish);
const drafts: string[] = [];
for (let i = 0; i < posts; i += 100)
  drafts.push(...(await Promise.all(Array.from({ length: Math.min(100, posts - i) }, (_, j) => create(`p ${i + j}`)))));
await new Promise((resolve) => setTimeout(resolve, 1_500));

counting = true;
const cpuStart = process.cpuUsage();
const started = performance.now();
await inParallel(drafts, publish);
// With an endpoint, until every webhook of the run has arrived (the engine's work is part of the cost).
while (withEndpoint && received < posts + warm.length) await new Promise((resolve) => setTimeout(resolve, 5));
const wallMs = performance.now() - started;
const cpu = process.cpuUsage(cpuStart);
counting = false;

const totalSync = [...syncMs.values()].reduce((sum, entry) => sum + entry.ms, 0);
console.log(
  `${posts} publishPost, ${concurrency} in flight, ${inMemory ? 'memory://' : 'data dir on disk'}, ${withEndpoint ? `one webhook endpoint (${received} received)` : 'no webhook endpoint'}`,
);
console.log(
  `${(posts / (wallMs / 1000)).toFixed(0)} publishes/s; process CPU per publish ${((cpu.user + cpu.system) / 1000 / posts).toFixed(2)} ms (load client included)`,
);
console.log(`PGlite CPU inside WebAssembly per publish: ${(totalSync / posts).toFixed(2)} ms`);
console.log('per statement: ms per publish, statements per publish, calls');
for (const [text, entry] of [...syncMs.entries()].sort((a, b) => b[1].ms - a[1].ms).slice(0, 20))
  console.log(
    `  ${(entry.ms / posts).toFixed(3).padStart(7)}  ${(entry.statements / posts).toFixed(2).padStart(5)}  ${String(entry.calls).padStart(6)}  ${text}`,
  );
await api.close();
receiver.close();
if (!inMemory) rmSync(dataDir, { recursive: true, force: true });
