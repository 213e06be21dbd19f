import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { signToken } from '@herald/auth';
import { subscriptionRedisKeys, webhookRedisKeys } from '@herald/contracts';
import { createTestSchema, type RedisClusterSetup, startRedisCluster, type TestSchema } from '@herald/testing';
import { waitFor } from '@herald/testing/ports';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { type DispatcherProcess, startDispatcherProcess } from './support/dispatcher-process.js';
import { postGraphql } from './support/graphql-http.js';
import { type AppSubscriber, subscribeWithHeraldClient } from './support/herald-clients.js';
import { readMetric } from './support/subscribers.js';
import { createPostPublishedEndpoint } from './support/webhooks.js';

// Redis Cluster end to end (docs/scaling.md, "One Redis shard"): a real 3-master cluster, two API pods
// and the webhook dispatcher as their own processes on it, real PostgreSQL. Resumable @herald/client applications on both pods and a
// webhook receiver must get every post (applications exactly once, in order), before and after the master
// that owns the organisation's channel and the webhook work stream is restarted (it comes back empty: no
// persistence), with posts published while it is down.

const JWT_SECRET = 'redis-cluster-test-secret-0123456789abcdef';
const PREFIX = `herald-rc-${randomUUID().slice(0, 8)}:`;
const CLIENTS_PER_POD = 3;
const POSTS_PER_PHASE = 6;
/** Published while the master is down: the outbox keeps them, and they must come out in commit order. */
const DOWN_POSTS = 4;

let cluster: RedisClusterSetup;
let schema: TestSchema;
const pods: ApiProcess[] = [];
let dispatcher: DispatcherProcess;
let receiver: Server;
let clients: AppSubscriber[] = [];
let org: string;
let owner: number;
let writer: string;
/** Post ids the receiver got, with how often. */
const delivered = new Map<string, number>();

/** A master's port for `key`'s slot. */
async function masterOf(node: Redis, key: string): Promise<number> {
  const slot = Number(await node.cluster('KEYSLOT', key));
  const range = (await node.cluster('SLOTS')).find(([start, end]) => start <= slot && slot <= end);
  return Number(range?.[2]?.[1]);
}

beforeAll(async () => {
  [cluster, schema] = await Promise.all([startRedisCluster(), createTestSchema(inject('databaseUrl'))]);
  // An organisation whose channel and history live on the master that also holds the webhook streams.
  const node = new Redis({ port: cluster.ports[0], host: '127.0.0.1', password: cluster.password });
  try {
    owner = await masterOf(node, webhookRedisKeys(PREFIX).workStream);
    for (let i = 0; !org; i++) {
      const candidate = `org-rc-${i}-${randomUUID().slice(0, 8)}`;
      if ((await masterOf(node, subscriptionRedisKeys(PREFIX, candidate).channel)) === owner) org = candidate;
    }
  } finally {
    node.disconnect();
  }
  writer = await signToken(JWT_SECRET, { sub: 'writer', orgs: [org] });

  receiver = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk) => {
      body += chunk;
    });
    request.on('end', () => {
      const id = (JSON.parse(body) as { data: { id: string } }).data.id;
      delivered.set(id, (delivered.get(id) ?? 0) + 1);
      response.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));

  const env = {
    DATABASE_URL: schema.url,
    REDIS_URL: cluster.url,
    HERALD_REDIS_PREFIX: PREFIX,
    JWT_SECRET,
    WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
    WEBHOOK_TIMEOUT_MS: '2000',
    WEBHOOK_RETRY_BASE_MS: '100',
  };
  // One first, so the migrations run once; then the second pod and the dispatcher together.
  pods.push(await startApiProcess(env));
  const [second, started] = await Promise.all([
    startApiProcess(env),
    startDispatcherProcess({
      ...env,
      NODE_ENV: 'test',
      WEBHOOK_POLL_INTERVAL_MS: '100',
      // Deliveries whose stream entry was lost with the restarted master go out again from PostgreSQL.
      WEBHOOK_REQUEUE_AFTER: '3s',
    }),
  ]);
  pods.push(second);
  dispatcher = started;

  const { port } = receiver.address() as { port: number };
  await createPostPublishedEndpoint(pods[0]!.baseUrl, writer, org, `http://127.0.0.1:${port}/hook`);
}, 180_000);

afterAll(async () => {
  await Promise.all(clients.map((client) => client.client.dispose()));
  await dispatcher?.stop('SIGTERM');
  await Promise.all(pods.map((pod) => pod.stop('SIGTERM')));
  await new Promise((resolve) => receiver?.close(resolve));
  await cluster?.stop();
  await schema?.drop();
});

/** Creates and publishes one post through `pod`; returns its id, or undefined when the publish failed. */
async function publish(pod: ApiProcess, title: string): Promise<string | undefined> {
  const created = await postGraphql(
    pod.baseUrl,
    writer,
    'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
    { input: { orgId: org, title } },
  );
  if (created.status !== 200 || created.body.errors) return undefined;
  const done = await postGraphql(pod.baseUrl, writer, 'mutation($id: ID!) { publishPost(id: $id) { id } }', {
    id: created.body.data.createPost.id,
  });
  return done.status === 200 && !done.body.errors ? (done.body.data.publishPost.id as string) : undefined;
}

describe('Redis Cluster: two API pods and the dispatcher on a 3-master cluster', () => {
  const titles: string[] = [];
  const ids: string[] = [];

  async function publishPhase(phase: string): Promise<void> {
    for (let i = 0; i < POSTS_PER_PHASE; i++) {
      const title = `${phase} ${i}`;
      const id = await publish(pods[i % 2]!, title);
      expect(id, `publishing "${title}"`).toBeDefined();
      titles.push(title);
      ids.push(id!);
    }
  }

  async function everyoneHasEverything(): Promise<void> {
    const last = titles.at(-1)!;
    await waitFor('every application to receive the last post', () => clients.every((c) => c.count(last) >= 1), {
      timeoutMs: 60_000,
      intervalMs: 100,
    });
    await waitFor('the receiver to get every post', () => ids.every((id) => delivered.has(id)), {
      timeoutMs: 60_000,
      intervalMs: 100,
    });
    for (const client of clients) {
      expect(client.errors).toEqual([]);
      expect(client.titles).toEqual(titles);
    }
  }

  it('delivers every post once to applications on both pods and to the webhook receiver', async () => {
    const token = () => signToken(JWT_SECRET, { sub: 'reader', orgs: [org] });
    clients = pods.flatMap((pod) =>
      Array.from({ length: CLIENTS_PER_POD }, () =>
        subscribeWithHeraldClient(`ws://127.0.0.1:${pod.port}/graphql`, token, org, { baseMs: 100, maxMs: 1_000 }),
      ),
    );
    await waitFor('every application to subscribe', async () => {
      const counts = await Promise.all(pods.map((pod) => readMetric(pod.baseUrl, 'herald_subscriptions_active')));
      return counts.every((count) => count === CLIENTS_PER_POD);
    });
    await publishPhase('before');
    await everyoneHasEverything();
  });

  it('after the master owning the channel and the webhook stream restarts empty, nothing is lost', async () => {
    // Posts are published while the master is down: they commit to PostgreSQL (the outbox) and go out
    // once it is back. Through pod 0 and pod 1 alternately, as before.
    let downPublished = 0;
    await cluster.restartNode(owner, async () => {
      for (const pod of pods) {
        await waitFor('readiness 503 while a master the pod listens on is down', async () => {
          return (await fetch(`${pod.baseUrl}/readiness`)).status === 503;
        });
      }
      for (; downPublished < DOWN_POSTS; downPublished++) {
        const title = `down ${downPublished}`;
        const id = await publish(pods[downPublished % 2]!, title);
        expect(id, `publishing "${title}" while the master is down`).toBeDefined();
        titles.push(title);
        ids.push(id!);
      }
    });
    for (const pod of pods) {
      await waitFor('readiness 200 again', async () => (await fetch(`${pod.baseUrl}/readiness`)).status === 200, {
        timeoutMs: 30_000,
      });
    }
    await publishPhase('after');
    await everyoneHasEverything();
    const duplicates = [...delivered.values()].filter((count) => count > 1).length;
    console.log(
      `redis cluster: ${clients.length} applications, ${titles.length} posts (${downPublished} while the master was down), ${duplicates} webhook deliveries repeated (at least once), ${clients.reduce((sum, c) => sum + c.reconnects, 0)} reconnects`,
    );
    expect(dispatcher.child.exitCode).toBeNull();
    for (const pod of pods) expect(pod.child.exitCode).toBeNull();
  }, 180_000);
});
