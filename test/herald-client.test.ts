import { randomUUID } from 'node:crypto';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { signToken } from '@herald/auth';
import type { TestSchema } from '@herald/testing';
import { freePort, waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { type ApiProcess, startApiProcess } from './support/api-process.js';
import { type AppSubscriber, subscribeWithHeraldClient } from './support/herald-clients.js';
import { createPodEnvironment } from './support/pod-environment.js';
import { createAndPublish, readMetric } from './support/subscribers.js';

// @herald/client against real API processes on one database and Redis: a fresh token after 4403,
// and resuming after the pod it was connected to restarts (events published meanwhile on the other pod).

const JWT_SECRET = 'herald-client-test-secret-0123456789abcdef';
const ORG = `org-${randomUUID()}`;

let schema: TestSchema;
let env: Record<string, string>;
let restartable: ApiProcess;
let restartablePort: number;
let other: ApiProcess;
let writer: string;
const subscribers: AppSubscriber[] = [];

beforeAll(async () => {
  ({ schema, env, writer } = await createPodEnvironment({
    redisPrefix: 'herald-client',
    jwtSecret: JWT_SECRET,
    orgId: ORG,
    shutdownGraceMs: 3_000,
  }));
  restartablePort = await freePort();
  [restartable, other] = await Promise.all([
    startApiProcess({ ...env, PORT: String(restartablePort) }),
    startApiProcess(env),
  ]);
}, 120_000);

afterAll(async () => {
  await Promise.all(subscribers.map((subscriber) => subscriber.client.dispose()));
  await Promise.all([restartable?.stop('SIGTERM'), other?.stop('SIGTERM')]);
  await schema?.drop();
});

/**
 * A TCP proxy to an API pod. `stall(port)` cuts what is behind every open connection while leaving
 * the client's side open and silent, and sends new connections to `port`.
 */
async function startStallableProxy(port: number) {
  let target = port;
  const pairs = new Set<{ client: Socket; upstream: Socket }>();
  const server = createServer((client) => {
    const upstream = connect(target, '127.0.0.1');
    const pair = { client, upstream };
    pairs.add(pair);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    stall(next: number) {
      target = next;
      for (const { client, upstream } of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        upstream
          .removeAllListeners('close')
          .removeAllListeners('error')
          .on('error', () => {});
        upstream.destroy();
      }
    },
    async close() {
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const activeOn = (pod: ApiProcess) => readMetric(pod.baseUrl, 'herald_subscriptions_active');

/**
 * When the test ends, passed or failed: ends its subscriber and waits until its pod counts it gone, so the
 * next test's "one more subscription than before" is about its own subscriber, not one still reconnecting
 * from an earlier test (a pod restart sends them all back to it). Registered with `onTestFinished`, so a
 * failure here is reported beside the test's own, never instead of it.
 */
function releaseWhenDone(subscriber: AppSubscriber, pod: () => ApiProcess, before: number) {
  onTestFinished(async () => {
    await subscriber.client.dispose();
    await waitFor('the subscription released', async () => (await activeOn(pod())) === before);
  });
}

describe('@herald/client', () => {
  it('asks for a fresh token when the server closes with 4403 at expiry, and misses nothing', async () => {
    // Tokens that expire 2 s after they are asked for: the server closes the socket at `exp` (4403).
    const shortLived = () =>
      signToken(JWT_SECRET, { sub: 'reader', orgs: [ORG] }, { expiresIn: Math.floor(Date.now() / 1000) + 2 });
    const before = await activeOn(other);
    const subscriber = subscribeWithHeraldClient(`ws://127.0.0.1:${other.port}/graphql`, shortLived, ORG);
    subscribers.push(subscriber);
    releaseWhenDone(subscriber, () => other, before);
    await waitFor('the subscription', async () => (await activeOn(other)) === before + 1);
    await createAndPublish(other.baseUrl, writer, ORG, 'token 1');
    await waitFor('a reconnect with a new token', () => subscriber.reconnects >= 1, { timeoutMs: 15_000 });
    await createAndPublish(other.baseUrl, writer, ORG, 'token 2');
    await waitFor('the post after the reconnect', () => subscriber.count('token 2') === 1);
    expect(subscriber.tokenCalls).toBeGreaterThanOrEqual(2);
    expect(subscriber.titles).toEqual(['token 1', 'token 2']);
    expect(subscriber.errors).toEqual([]);
  }, 60_000);

  it('resumes after its pod restarts: the posts published meanwhile, once, in order, then live', async () => {
    const token = () => signToken(JWT_SECRET, { sub: 'reader', orgs: [ORG] });
    const before = await activeOn(restartable);
    const subscriber = subscribeWithHeraldClient(`ws://127.0.0.1:${restartablePort}/graphql`, token, ORG);
    subscribers.push(subscriber);
    releaseWhenDone(subscriber, () => restartable, before);
    await waitFor('the subscription', async () => (await activeOn(restartable)) === before + 1);
    await createAndPublish(other.baseUrl, writer, ORG, 'before restart');
    await waitFor('the first post', () => subscriber.count('before restart') === 1);

    expect(await restartable.stop('SIGTERM')).toBe(0);
    for (let i = 1; i <= 5; i++) await createAndPublish(other.baseUrl, writer, ORG, `while down ${i}`);
    restartable = await startApiProcess({ ...env, PORT: String(restartablePort) });
    await waitFor('the posts published while down', () => subscriber.count('while down 5') === 1, {
      timeoutMs: 30_000,
    });
    await createAndPublish(other.baseUrl, writer, ORG, 'after restart');
    await waitFor('the live post', () => subscriber.count('after restart') === 1);
    expect(subscriber.titles.filter((title) => !title.startsWith('token'))).toEqual([
      'before restart',
      ...Array.from({ length: 5 }, (_, i) => `while down ${i + 1}`),
      'after restart',
    ]);
    expect(subscriber.reconnects).toBeGreaterThanOrEqual(1);
    expect(subscriber.cursorExpired).toBe(0);
    expect(subscriber.errors).toEqual([]);
  }, 90_000);

  it('resumes a postPublished document written without $after: the library adds it, nothing is missed', async () => {
    const token = () => signToken(JWT_SECRET, { sub: 'reader', orgs: [ORG] });
    const before = await activeOn(restartable);
    const subscriber = subscribeWithHeraldClient(
      `ws://127.0.0.1:${restartablePort}/graphql`,
      token,
      ORG,
      { baseMs: 200, maxMs: 2_000 },
      // As an application would write it, with no cursor variable or argument.
      { query: 'subscription Plain($orgId: ID!) { postPublished(orgId: $orgId) { title } }' },
    );
    subscribers.push(subscriber);
    releaseWhenDone(subscriber, () => restartable, before);
    await waitFor('the subscription', async () => (await activeOn(restartable)) === before + 1);
    await createAndPublish(other.baseUrl, writer, ORG, 'plain before');
    await waitFor('the first post', () => subscriber.count('plain before') === 1);

    expect(await restartable.stop('SIGTERM')).toBe(0);
    for (let i = 1; i <= 5; i++) await createAndPublish(other.baseUrl, writer, ORG, `plain while down ${i}`);
    restartable = await startApiProcess({ ...env, PORT: String(restartablePort) });
    await waitFor('the posts published while down', () => subscriber.count('plain while down 5') === 1, {
      timeoutMs: 30_000,
    });
    expect(subscriber.titles.filter((title) => title.startsWith('plain'))).toEqual([
      'plain before',
      ...Array.from({ length: 5 }, (_, i) => `plain while down ${i + 1}`),
    ]);
    expect(subscriber.cursorExpired).toBe(0);
    expect(subscriber.errors).toEqual([]);
  }, 90_000);

  it('leaves a server that stops answering pings, reconnects elsewhere and resumes', async () => {
    // A proxy in front of the pods, like a load balancer: stall() leaves the client's socket open with
    // nothing behind it (a frozen pod, a dead network path) and sends new connections to the other pod.
    const proxy = await startStallableProxy(restartablePort);
    const token = () => signToken(JWT_SECRET, { sub: 'reader', orgs: [ORG] });
    const before = await activeOn(restartable);
    const beforeOther = await activeOn(other);
    const subscriber = subscribeWithHeraldClient(
      `ws://127.0.0.1:${proxy.port}/graphql`,
      token,
      ORG,
      { baseMs: 100, maxMs: 500 },
      {},
      { keepAliveMs: 500, pongTimeoutMs: 500 },
    );
    subscribers.push(subscriber);
    // It starts on `restartable` (through the proxy) and ends on `other`; its stalled first connection is
    // released once the proxy closes (the finally below).
    releaseWhenDone(subscriber, () => other, beforeOther);
    onTestFinished(() =>
      waitFor('the stalled connection released', async () => (await activeOn(restartable)) === before),
    );
    try {
      await waitFor('the subscription', async () => (await activeOn(restartable)) === before + 1);
      await createAndPublish(other.baseUrl, writer, ORG, 'ping before');
      await waitFor('the first post', () => subscriber.count('ping before') === 1);

      proxy.stall(other.port);
      for (let i = 1; i <= 3; i++) await createAndPublish(other.baseUrl, writer, ORG, `ping stalled ${i}`);
      await waitFor('the posts published behind the stall', () => subscriber.count('ping stalled 3') === 1, {
        timeoutMs: 20_000,
      });
      expect(subscriber.titles.filter((title) => title.startsWith('ping'))).toEqual([
        'ping before',
        'ping stalled 1',
        'ping stalled 2',
        'ping stalled 3',
      ]);
      expect(subscriber.reconnects).toBeGreaterThanOrEqual(1);
      expect(subscriber.errors).toEqual([]);
    } finally {
      await subscriber.client.dispose();
      await proxy.close();
    }
  }, 60_000);

  it('abandons a connection attempt that a frozen pod never answers, and connects to a live one', async () => {
    // A pod that accepts the TCP connection and never answers the upgrade (a frozen process behind a
    // load balancer): the first attempt lands on it; later attempts go to a live pod.
    const frozen = createServer(() => {});
    await new Promise<void>((resolve) => frozen.listen(0, '127.0.0.1', resolve));
    let reached = 0;
    frozen.on('connection', () => reached++);
    const proxy = await startStallableProxy((frozen.address() as AddressInfo).port);
    const before = await activeOn(other);
    const token = () => signToken(JWT_SECRET, { sub: 'reader', orgs: [ORG] });
    const subscriber = subscribeWithHeraldClient(
      `ws://127.0.0.1:${proxy.port}/graphql`,
      token,
      ORG,
      { baseMs: 100, maxMs: 500 },
      {},
      { connectTimeoutMs: 1_000 },
    );
    subscribers.push(subscriber);
    releaseWhenDone(subscriber, () => other, before);
    try {
      await waitFor('the attempt on the frozen pod', () => reached === 1);
      proxy.stall(other.port);
      await waitFor('a connection to the live pod', () => subscriber.connects > 0, { timeoutMs: 15_000 });
      await createAndPublish(other.baseUrl, writer, ORG, 'after frozen');
      await waitFor('the post', () => subscriber.count('after frozen') === 1);
      expect(subscriber.errors).toEqual([]);
    } finally {
      await subscriber.client.dispose();
      await proxy.close();
      frozen.close();
    }
  }, 60_000);

  it('with startAtHead, a subscription dropped before its first event misses nothing', async () => {
    const token = () => signToken(JWT_SECRET, { sub: 'reader', orgs: [ORG] });
    const before = await activeOn(restartable);
    const subscriber = subscribeWithHeraldClient(
      `ws://127.0.0.1:${restartablePort}/graphql`,
      token,
      ORG,
      { baseMs: 200, maxMs: 2_000 },
      { startAtHead: true },
    );
    subscribers.push(subscriber);
    releaseWhenDone(subscriber, () => restartable, before);
    await waitFor('the subscription', async () => (await activeOn(restartable)) === before + 1);

    // Its pod goes away before any event: without a cursor it would resubscribe from "now" and miss these.
    expect(await restartable.stop('SIGTERM')).toBe(0);
    for (let i = 1; i <= 3; i++) await createAndPublish(other.baseUrl, writer, ORG, `before first ${i}`);
    restartable = await startApiProcess({ ...env, PORT: String(restartablePort) });
    await waitFor('the posts published while down', () => subscriber.count('before first 3') === 1, {
      timeoutMs: 30_000,
    });
    expect(subscriber.titles.filter((title) => title.startsWith('before first'))).toEqual([
      'before first 1',
      'before first 2',
      'before first 3',
    ]);
    expect(subscriber.cursorExpired).toBe(0);
    expect(subscriber.errors).toEqual([]);
  }, 90_000);

  it('disposes cleanly while it is reconnecting to a server that is gone', async () => {
    // Nothing listens on this port: the client keeps retrying, and dispose() lands mid-retry, where
    // graphql-ws 6 rejects its own dispose() with the "All Subscriptions Gone" close event.
    const port = await freePort();
    const subscriber = subscribeWithHeraldClient(`ws://127.0.0.1:${port}/graphql`, () => writer, ORG, {
      baseMs: 20,
      maxMs: 50,
    });
    // Let it fail to connect a few times (20–50 ms apart), so dispose() finds it between attempts.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await expect(subscriber.client.dispose()).resolves.toBeUndefined();
    expect(subscriber.titles).toEqual([]);
  });

  it('disposes cleanly during its first connection attempt to a server that is gone', async () => {
    // dispose() right away waits for the attempt in progress, which ends with the socket's error event
    // (connection refused), and graphql-ws 6 rejects its dispose() with that event: still a clean dispose.
    const port = await freePort();
    const subscriber = subscribeWithHeraldClient(`ws://127.0.0.1:${port}/graphql`, () => writer, ORG, {
      baseMs: 1_000,
      maxMs: 1_000,
    });
    await expect(subscriber.client.dispose()).resolves.toBeUndefined();
    expect(subscriber.titles).toEqual([]);
  });
});
