// publishPost → first `next` frame, alone (how much of one pod's "one event → all sockets"
// p99 is the publish path). One Herald API in this process (in-memory pub/sub, the fan-out bench's
// one-pod set-up) on PostgreSQL or PGlite, one graphql-transport-ws subscriber over a real socket, posts
// published one at a time over HTTP: from the call to the frame, and until the mutation answered;
// `createPost` (one write, nothing to publish) is the same run's baseline.
// Usage: DATABASE_URL=postgres://… node --import tsx bench/micro/publish-first-frame.ts [posts=200]
//        (without DATABASE_URL: embedded PGlite)
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { WebSocket } from 'ws';

const root = join(dirname(fileURLToPath(import.meta.url)), '../..');
const { startTestApi } = (await import(pathToFileURL(join(root, 'apps/api/src/testing/test-api.ts')).href)) as {
  startTestApi: typeof import('../../apps/api/src/testing/test-api.js').startTestApi;
};

const posts = Number(process.argv[2] ?? 200);
// A schema of its own on PostgreSQL (dropped at the end); PGlite in memory otherwise.
const schema = `bench_first_frame_${process.pid}`;
let databaseUrl: string | undefined;
if (process.env.DATABASE_URL) {
  const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await admin.connect();
  await admin.query(`create schema ${schema}`);
  await admin.end();
  const url = new URL(process.env.DATABASE_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  databaseUrl = url.toString();
}
const api = await startTestApi({ listen: true, env: databaseUrl ? { DATABASE_URL: databaseUrl } : {} });
const token = await api.token({ sub: 'writer', name: 'Writer', orgs: ['org-l'] });
const base = api.baseUrl as string;

async function graphql(query: string, variables: Record<string, unknown>) {
  const response = await fetch(`${base}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = (await response.json()) as { data?: Record<string, { id: string }>; errors?: unknown };
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data as Record<string, { id: string }>;
}
const create = async (title: string) =>
  (
    await graphql('mutation($input: CreatePostInput!) { createPost(input: $input) { id } }', {
      input: { orgId: 'org-l', title, tags: [] },
    })
  ).createPost!.id;

const ws = new WebSocket(`${base.replace('http', 'ws')}/graphql`, 'graphql-transport-ws');
const arrivals = new Map<string, (at: number) => void>();
await new Promise<void>((resolve, reject) => {
  ws.once('error', reject);
  ws.once('open', () => ws.send(JSON.stringify({ type: 'connection_init', payload: { authToken: token } })));
  ws.on('message', (data) => {
    const at = performance.now();
    const message = JSON.parse(String(data));
    if (message.type === 'connection_ack') {
      ws.send(
        JSON.stringify({
          id: '1',
          type: 'subscribe',
          payload: { query: 'subscription { postPublished(orgId: "org-l") { id title } }' },
        }),
      );
      setTimeout(resolve, 300);
    } else if (message.type === 'next') arrivals.get(message.payload.data.postPublished.title)?.(at);
  });
});

const summary = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!.toFixed(2);
  return `p50 ${at(0.5)} ms, p99 ${at(0.99)} ms`;
};
const toFrame: number[] = [];
const answered: number[] = [];
const created: number[] = [];
for (let i = 0; i < posts + 20; i++) {
  const title = `post ${i}`;
  const started = performance.now();
  const id = await create(title);
  if (i >= 20) created.push(performance.now() - started);
  const arrived = new Promise<number>((resolve) => arrivals.set(title, resolve));
  const start = performance.now();
  await graphql('mutation($id: ID!) { publishPost(id: $id) { id } }', { id });
  const answer = performance.now() - start;
  const frame = (await arrived) - start;
  if (i >= 20) {
    answered.push(answer);
    toFrame.push(frame);
  }
}
console.log(`${process.env.DATABASE_URL ? 'PostgreSQL' : 'PGlite'}, in-memory pub/sub, ${posts} posts one at a time`);
console.log(`publishPost call → next frame: ${summary(toFrame)}`);
console.log(`publishPost answered:          ${summary(answered)}`);
console.log(`createPost answered (baseline): ${summary(created)}`);
ws.close();
await api.close();
if (process.env.DATABASE_URL) {
  const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await admin.connect();
  await admin.query(`drop schema ${schema} cascade`);
  await admin.end();
}
