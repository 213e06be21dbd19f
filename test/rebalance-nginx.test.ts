import { randomUUID } from 'node:crypto';
import { signToken } from '@herald/auth';
import type { TestSchema } from '@herald/testing';
import { freePorts, waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { type AppSubscriber, subscribeWithHeraldClient, warmUpClients, warmUpsSeen } from './support/herald-clients.js';
import { type NginxProcess, startNginx } from './support/nginx.js';
import { createPodEnvironment } from './support/pod-environment.js';
import { createAndPublish, readMetric } from './support/subscribers.js';

// Socket rebalancing through the load balancer (docs/scaling.md): two pods behind the nginx of deploy/ hold
// 2,000 subscribed @herald/client applications; a third pod joins (nginx reloaded with it), the loaded
// pods shed sockets with 1012 a bounded number per second, the applications reconnect through nginx and
// resume, and the spread evens out to within 20 % of the fair share. Posts go out at a steady rate all
// along: every application must see every post exactly once, in order.

const JWT_SECRET = 'rebalance-nginx-secret-0123456789abcdef';
const ORG = `org-${randomUUID()}`;
const CLIENTS = Number(process.env.REBALANCE_CLIENTS ?? 2_000);
/** Clients connect in waves of this many, each wave subscribed before the next (a 2-core CI machine). */
const WAVE = 250;
const PUBLISH_INTERVAL_MS = 250;
/** Bound on the publishing loop, whatever happens. */
const MAX_POSTS = 600;
/** Each pod must end within this fraction of the fair share (total ÷ pods). */
const SPREAD = 0.2;

let schema: TestSchema;
let env: Record<string, string>;
let ports: number[];
const pods: ApiProcess[] = [];
let nginx: NginxProcess;
const clients: AppSubscriber[] = [];
let writer: string;

beforeAll(async () => {
  ({ schema, env, writer } = await createPodEnvironment({
    // Its own prefix: the pods' socket reports (`<prefix>{rebalance}:pods`) are this test's only.
    redisPrefix: 'herald-rebalance',
    jwtSecret: JWT_SECRET,
    orgId: ORG,
    shutdownGraceMs: 5_000,
    // Every client is one user: the default cap of sockets per user would refuse most of them.
    socketsPerUser: 0,
  }));
  ports = await freePorts(3);
  pods.push(await startApiProcess({ ...env, PORT: String(ports[0]) }));
  pods.push(await startApiProcess({ ...env, PORT: String(ports[1]) }));
  nginx = await startNginx(ports.slice(0, 2));
}, 180_000);

afterAll(async () => {
  await Promise.all(clients.map((client) => client.client.dispose()));
  await nginx?.stop();
  await Promise.all(pods.map((pod) => pod.stop('SIGTERM')));
  await schema?.drop();
});

async function perPod(): Promise<number[]> {
  return Promise.all(pods.map((pod) => readMetric(pod.baseUrl, 'herald_subscriptions_active').catch(() => 0)));
}

const sum = (counts: number[]) => counts.reduce((a, b) => a + b, 0);

function even(counts: number[]): boolean {
  const fair = sum(counts) / counts.length;
  return counts.every((count) => Math.abs(count - fair) <= fair * SPREAD);
}

describe('socket rebalancing through nginx', () => {
  it('a third pod joins: the spread evens out and every client receives every post exactly once', async () => {
    const token = await signToken(JWT_SECRET, { sub: 'reader', orgs: [ORG] });
    const url = `ws://127.0.0.1:${nginx.port}/graphql`;
    for (let wave = 0; clients.length < CLIENTS; wave++) {
      const size = Math.min(WAVE, CLIENTS - clients.length);
      clients.push(
        ...Array.from({ length: size }, () =>
          subscribeWithHeraldClient(url, () => token, ORG, { baseMs: 200, maxMs: 2_000 }),
        ),
      );
      await waitFor(`wave ${wave} to subscribe`, async () => sum(await perPod()) === clients.length, {
        timeoutMs: 60_000,
        intervalMs: 200,
      });
    }
    const before = await perPod();
    // A subscription resumes from the last event it received: give every client one first (the rebalancer
    // may already shed sockets here: 1063/937 was seen, so a client can need a second warm-up).
    const warmUps = await warmUpClients(clients, (title) => createAndPublish(pods[0]!.baseUrl, writer, ORG, title));

    const published: string[] = [];
    let publishing = true;
    // A failed publish stops the loop and fails the test with its own error (not a wait's timeout).
    let publishError: unknown;
    const publisher = (async () => {
      for (let n = 1; publishing && n <= MAX_POSTS; n++) {
        const title = `post ${n}`;
        const result = await createAndPublish(pods[n % 2]!.baseUrl, writer, ORG, title);
        if (result.errors) throw new Error(`publish failed: ${JSON.stringify(result.errors)}`);
        published.push(title);
        await new Promise((resolve) => setTimeout(resolve, PUBLISH_INTERVAL_MS));
      }
    })().catch((error: unknown) => {
      publishError = error;
    });

    // The third pod joins: nginx first (new connections may go to it), then the pod itself.
    await nginx.reload(ports);
    const joinedAt = Date.now();
    pods.push(await startApiProcess({ ...env, PORT: String(ports[2]) }));
    let after: number[] = [];
    await waitFor(
      'the spread to even out',
      async () => {
        after = await perPod();
        return sum(after) === CLIENTS && even(after);
      },
      { timeoutMs: 120_000, intervalMs: 250 },
    );
    const evenedMs = Date.now() - joinedAt;
    // Steady rate on for a few more posts after the spread evened out, then stop and let every client catch up.
    const target = published.length + 8;
    await waitFor(
      'a few more posts',
      () => {
        if (publishError) throw publishError;
        return published.length >= target;
      },
      { timeoutMs: 60_000 },
    );
    publishing = false;
    await publisher;
    if (publishError) throw publishError;
    const last = published.at(-1)!;
    await waitFor('every client to reach the last post', () => clients.every((client) => client.count(last) >= 1), {
      timeoutMs: 60_000,
      intervalMs: 200,
    });
    // The rebalancer may still be shedding its last few sockets (a reconnect in flight is on no pod):
    // wait, bounded, for every client to be on a pod again with the spread still even.
    let settled: number[] = [];
    await waitFor(
      'every client on a pod, evenly spread',
      async () => {
        settled = await perPod();
        return sum(settled) === CLIENTS && even(settled);
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    ).catch(() => {});

    const reconnects = clients.reduce((total, client) => total + client.reconnects, 0);
    console.log(
      `rebalance through nginx: ${CLIENTS} clients; before ${before.join('/')}; evened out to ${after.join('/')} ${evenedMs} ms after the third pod joined (start-up included); settled ${settled.join('/')}; ${reconnects} reconnects; ${warmUps.length} warm-up(s); ${published.length} posts`,
    );
    expect(before).toHaveLength(2);
    expect(sum(settled)).toBe(CLIENTS);
    expect(even(settled)).toBe(true);
    expect(reconnects).toBeGreaterThan(0);
    for (const client of clients) {
      expect(client.errors).toEqual([]);
      expect(client.cursorExpired).toBe(0);
      // Every warm-up from the first it received, then every post: each once, in order.
      expect(client.titles).toEqual([...warmUpsSeen(client, warmUps), ...published]);
    }
  }, 400_000);
});
