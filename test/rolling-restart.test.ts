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

// Rolling restart, clients resuming from their cursors (docs/subscriptions.md): three pods behind the nginx of deploy/, 300 @herald/client
// applications, posts published at a steady rate while each pod in turn gets SIGTERM and is started
// again on its port. Every application must see every post exactly once, in publish order.

const JWT_SECRET = 'rolling-restart-secret-0123456789abcdef';
const ORG = `org-${randomUUID()}`;
const CLIENTS = Number(process.env.ROLLING_CLIENTS ?? 300);
/** One post per interval, published straight to a pod that is not restarting (no ambiguous failures). */
const PUBLISH_INTERVAL_MS = 200;
/** Bound on the publishing loop, whatever happens. */
const MAX_POSTS = 400;

let schema: TestSchema;
let env: Record<string, string>;
let ports: number[];
let pods: ApiProcess[];
let nginx: NginxProcess;
let clients: AppSubscriber[] = [];
let writer: string;

beforeAll(async () => {
  ({ schema, env, writer } = await createPodEnvironment({
    redisPrefix: 'herald-rolling',
    jwtSecret: JWT_SECRET,
    orgId: ORG,
    shutdownGraceMs: 5_000,
    // Every client is one user: the default cap of sockets per user would refuse most of them.
    socketsPerUser: 0,
  }));
  ports = await freePorts(3);
  pods = await Promise.all(ports.map((port) => startApiProcess({ ...env, PORT: String(port) })));
  nginx = await startNginx(ports);
}, 180_000);

afterAll(async () => {
  await Promise.all(clients.map((client) => client.client.dispose()));
  await nginx?.stop();
  await Promise.all((pods ?? []).map((pod) => pod.stop('SIGTERM')));
  await schema?.drop();
});

async function totalActive(): Promise<number> {
  const counts = await Promise.all(
    pods.map((pod) => readMetric(pod.baseUrl, 'herald_subscriptions_active').catch(() => 0)),
  );
  return counts.reduce((a, b) => a + b, 0);
}

describe('rolling restart behind nginx', () => {
  it('every client receives every post exactly once, in order, while each pod restarts in turn', async () => {
    const token = () => signToken(JWT_SECRET, { sub: 'reader', orgs: [ORG] });
    clients = Array.from({ length: CLIENTS }, () =>
      subscribeWithHeraldClient(`ws://127.0.0.1:${nginx.port}/graphql`, token, ORG, { baseMs: 100, maxMs: 1_000 }),
    );
    await waitFor('every client to subscribe', async () => (await totalActive()) === CLIENTS, { timeoutMs: 60_000 });
    // A subscription resumes from the last event it received: give every client one before the restarts.
    // The pods count a subscription a moment before it listens, and nothing is promised to a subscription
    // before it listens: under load a client can miss the first warm-up, so another goes out every 5 s.
    const warmUps = await warmUpClients(clients, (title) => createAndPublish(pods[0]!.baseUrl, writer, ORG, title));

    const published: string[] = [];
    let victim = -1;
    /**
     * Publishes through a pod that is not restarting. The victim can change while a publish is being
     * sent to it: a refused connection committed nothing, so it goes to the next pod instead (bounded).
     */
    const publishAvoidingVictim = async (n: number, title: string) => {
      for (let attempt = 0; ; attempt++) {
        const through = pods[(victim + 1 + ((n + attempt) % 2)) % 3]!; // never the pod being restarted
        try {
          return await createAndPublish(through.baseUrl, writer, ORG, title);
        } catch (error) {
          const refused = (error as { cause?: { code?: string } }).cause?.code === 'ECONNREFUSED';
          if (!refused || attempt >= 5) throw error;
        }
      }
    };
    let publishing = true;
    const publisher = (async () => {
      for (let n = 1; publishing && n <= MAX_POSTS; n++) {
        const title = `post ${n}`;
        const result = await publishAvoidingVictim(n, title);
        if (result.errors) throw new Error(`publish failed: ${JSON.stringify(result.errors)}`);
        published.push(title);
        await new Promise((resolve) => setTimeout(resolve, PUBLISH_INTERVAL_MS));
      }
    })();

    const figures: string[] = [];
    for (let index = 0; index < 3; index++) {
      victim = index;
      const publishedBefore = published.length;
      const stoppedAt = Date.now();
      expect(await pods[index]!.stop('SIGTERM')).toBe(0);
      const survivorsBack = Date.now();
      await waitFor('the clients to resubscribe on the other pods', async () => (await totalActive()) === CLIENTS, {
        timeoutMs: 60_000,
        intervalMs: 100,
      });
      const reconnectedMs = Date.now() - stoppedAt;
      const latest = published.at(-1);
      await waitFor(
        'every client to catch up',
        () => clients.every((client) => !latest || client.count(latest) === 1),
        {
          timeoutMs: 60_000,
          intervalMs: 100,
        },
      );
      const caughtUpMs = Date.now() - stoppedAt;
      const survivors = pods.filter((_, i) => i !== index);
      const replayed = await Promise.all(
        survivors.map((pod) => readMetric(pod.baseUrl, 'herald_subscription_events_replayed_total')),
      );
      pods[index] = await startApiProcess({ ...env, PORT: String(ports[index]) });
      figures.push(
        `pod ${index}: drained in ${survivorsBack - stoppedAt} ms, all ${CLIENTS} clients subscribed again ${reconnectedMs} ms and caught up ${caughtUpMs} ms after SIGTERM; ${published.length - publishedBefore} posts published meanwhile; surviving pods have replayed ${replayed.reduce((a, b) => a + b, 0)} events from history so far`,
      );
    }
    publishing = false;
    await publisher;
    const last = published.at(-1)!;
    await waitFor('every client to reach the last post', () => clients.every((client) => client.count(last) >= 1), {
      timeoutMs: 60_000,
    });

    const reconnects = clients.reduce((sum, client) => sum + client.reconnects, 0);
    console.log(
      [
        `rolling restart: ${CLIENTS} clients, ${published.length} posts, ${reconnects} reconnects in all`,
        ...figures,
      ].join('\n'),
    );
    for (const client of clients) {
      expect(client.errors).toEqual([]);
      expect(client.cursorExpired).toBe(0);
      // Every warm-up from the first it received, then every post: each once, in order.
      expect(client.titles).toEqual([...warmUpsSeen(client, warmUps), ...published]);
    }
    expect(reconnects).toBeGreaterThanOrEqual(CLIENTS); // each pod's clients moved at least once
  }, 400_000);
});
