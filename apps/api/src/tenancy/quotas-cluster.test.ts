import { randomUUID } from 'node:crypto';
import { createRedisClient } from '@herald/config/redis';
import { createTestSchema, type TestSchema } from '@herald/testing';
import { type CuttableProxy, startCuttableProxy } from '@herald/testing/cuttable-proxy';
import { waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { openAckedSocket, openRawSocket } from '../testing/raw-socket.js';
import { startTestApi, type TestApi } from '../testing/test-api.js';

// Two API pods (cluster mode: one PostgreSQL schema, one Redis) reaching Redis through a proxy the test
// can cut: the quotas hold for the sum of both pods, and while Redis is away each pod holds its share.

const OPS_PER_SECOND = 30;
const POSTS = 'query($orgId: ID!) { posts(orgId: $orgId, first: 1) { edges { node { id } } } }';
/** Attempts at a burst that fits in one quota window (a slow machine may need a second try). */
const BURST_ATTEMPTS = 8;

let schema: TestSchema;
let proxy: CuttableProxy;
let pods: TestApi[];
const prefix = `herald-quotas-${randomUUID()}:`;

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  proxy = await startCuttableProxy(new URL(inject('redisUrl')));
  const env = {
    DATABASE_URL: schema.url,
    REDIS_URL: `redis://127.0.0.1:${proxy.port}`,
    HERALD_REDIS_PREFIX: prefix,
    TENANT_OPERATIONS_PER_SECOND: String(OPS_PER_SECOND),
    TENANT_SOCKETS_PER_USER: '2',
    WS_REBALANCE: 'false',
  };
  pods = [];
  for (let i = 0; i < 2; i++) pods.push(await startTestApi({ listen: true, env }));
  // Each pod learns how many pods share the quotas when it renews its presence.
  await waitFor('both pods to see each other', () => pods.every((pod) => pod.app.quotas.pods === 2), {
    timeoutMs: 25_000,
    intervalMs: 200,
  });
}, 60_000);

afterAll(async () => {
  proxy?.restore();
  await Promise.all((pods ?? []).map((pod) => pod.close()));
  await proxy?.close();
  await schema?.drop();
});

interface Burst {
  statuses: number[];
  codes: unknown[];
  elapsedMs: number;
}

/** `count` requests for `orgId`, alternating pods, all at once; when they were all answered. */
async function burst(orgId: string, count: number): Promise<Burst> {
  const token = await pods[0]!.token({ sub: `user-${orgId}`, orgs: [orgId] });
  const startedAt = performance.now();
  const answers = await Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const response = await fetch(`${pods[i % 2]!.baseUrl}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ query: POSTS, variables: { orgId } }),
      });
      const body = await response.json();
      return { status: response.status, code: body.errors?.[0]?.extensions?.code };
    }),
  );
  return {
    statuses: answers.map((answer) => answer.status),
    codes: answers.filter((answer) => answer.status !== 200).map((answer) => answer.code),
    elapsedMs: performance.now() - startedAt,
  };
}

/**
 * A burst that fits in one quota window: a window starts with an organisation's first counted request
 * and lasts a second, so a burst answered within a second is counted in exactly one window.
 */
async function burstInOneWindow(count: number): Promise<Burst> {
  for (let attempt = 0; attempt < BURST_ATTEMPTS; attempt++) {
    const result = await burst(`org-${randomUUID()}`, count);
    if (result.elapsedMs < 950) return result;
  }
  throw new Error('no burst was answered within one window');
}

const accepted = (result: Burst) => result.statuses.filter((status) => status === 200).length;

describe('quotas across two pods sharing Redis', () => {
  it('lets through exactly the quota for both pods together, and refuses the rest with 429 RATE_LIMITED', async () => {
    await burst(`org-${randomUUID()}`, 2); // each pod compiles the query once
    const result = await burstInOneWindow(OPS_PER_SECOND + 10);
    expect(accepted(result)).toBe(OPS_PER_SECOND);
    expect(result.statuses.filter((status) => status !== 200).every((status) => status === 429)).toBe(true);
    expect(new Set(result.codes)).toEqual(new Set(['RATE_LIMITED']));
  });

  it("caps a user's sockets across pods: the one past the cap is closed with 1013", async () => {
    const [a, b] = pods.map((pod) => `${pod.baseUrl!.replace('http', 'ws')}/graphql`) as [string, string];
    const token = await pods[0]!.token({ sub: `sockets-${randomUUID()}`, orgs: ['org-sockets'] });
    const first = await openAckedSocket(a, { authToken: token });
    const second = await openAckedSocket(b, { authToken: token });
    const third = await openRawSocket(a);
    third.send({ type: 'connection_init', payload: { authToken: token } });
    expect((await third.closed).code).toBe(1013);
    second.socket.close();
    await second.closed;
    // Released on pod B: pod A admits one again.
    await waitFor('the released place', async () => {
      const again = await openRawSocket(a);
      again.send({ type: 'connection_init', payload: { authToken: token } });
      const answer = await Promise.race([again.next('connection_ack').then(() => 'ack'), again.closed]);
      again.socket.close();
      return answer === 'ack';
    });
    first.socket.close();
  });
});

describe('Redis unreachable mid-storm', () => {
  it('holds each pod to its share locally, never answers 500, and shares again once Redis is back', async () => {
    const before = await fallbacks(pods[0]!);
    proxy.cut();
    // Pod 0 alone, as fast as it goes: it holds ceil(30 / 2) = 15 a second, refusing the rest with 429.
    let result: Burst | undefined;
    for (let attempt = 0; attempt < BURST_ATTEMPTS && !result; attempt++) {
      const orgId = `org-${randomUUID()}`;
      const token = await pods[0]!.token({ sub: `user-${orgId}`, orgs: [orgId] });
      const startedAt = performance.now();
      const answers = await Promise.all(
        Array.from({ length: OPS_PER_SECOND }, async () => {
          const response = await fetch(`${pods[0]!.baseUrl}/graphql`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
            body: JSON.stringify({ query: POSTS, variables: { orgId } }),
          });
          const body = await response.json();
          return { status: response.status, code: body.errors?.[0]?.extensions?.code };
        }),
      );
      const elapsedMs = performance.now() - startedAt;
      if (elapsedMs < 900) {
        result = {
          statuses: answers.map((answer) => answer.status),
          codes: answers.filter((answer) => answer.status !== 200).map((answer) => answer.code),
          elapsedMs,
        };
      }
    }
    if (!result) throw new Error('no burst was answered within one window');
    expect(accepted(result)).toBe(Math.ceil(OPS_PER_SECOND / 2));
    expect(result.statuses.filter((status) => status !== 200).every((status) => status === 429)).toBe(true);
    expect(new Set(result.codes)).toEqual(new Set(['RATE_LIMITED']));
    expect(await fallbacks(pods[0]!)).toBeGreaterThan(before);

    proxy.restore();
    // Back on Redis, on each pod (each reconnects on its own): its checks count in the shared key again.
    const redis = createRedisClient(inject('redisUrl'));
    try {
      for (const pod of pods) {
        const orgId = `org-${randomUUID()}`;
        const token = await pod.token({ sub: `user-${orgId}`, orgs: [orgId] });
        await waitFor(
          'checks to reach Redis again',
          async () => {
            const response = await fetch(`${pod.baseUrl}/graphql`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
              body: JSON.stringify({ query: POSTS, variables: { orgId } }),
            });
            expect(response.status).toBe(200);
            return (await redis.exists(`${prefix}tenant:ops:org:${orgId}`)) === 1;
          },
          { timeoutMs: 20_000, intervalMs: 100 },
        );
      }
    } finally {
      redis.disconnect();
    }
    const shared = await burstInOneWindow(OPS_PER_SECOND + 10);
    expect(accepted(shared)).toBe(OPS_PER_SECOND);
  });
});

async function fallbacks(pod: TestApi): Promise<number> {
  const metrics = await (await pod.fetch('/metrics')).text();
  const line = metrics.split('\n').find((row) => row.startsWith('herald_tenant_quota_fallbacks_total '));
  return Number(line?.split(' ')[1] ?? 0);
}
