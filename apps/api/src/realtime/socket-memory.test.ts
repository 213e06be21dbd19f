import type { IncomingMessage } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { openAckedSocket, type RawSocket } from '../testing/raw-socket.js';
import { startTestApi, type TestApi } from '../testing/test-api.js';

// What a subscribed socket keeps alive on the server (its memory is measured by bench/src/heap-diff.ts).
// Checked with WeakRefs and a forced GC, never with sizes or timings.

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const SUBSCRIBE = 'subscription($orgId: ID!) { postPublished(orgId: $orgId) { id title tags author { name } } }';

let api: TestApi;
let wsUrl: string;
let alice: string;

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl'), listen: true });
  wsUrl = `${api.baseUrl!.replace('http', 'ws')}/graphql`;
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-a'] });
});

afterAll(() => api.close());

/** Forces GCs until `released()` holds, for at most 5 s (WeakRefs clear only between tasks). */
async function untilCollected(released: () => boolean): Promise<boolean> {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    gc();
    if (released()) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return false;
}

/** Waits (at most 5 s) until exactly `count` subscriptions are active on the server. */
async function untilActiveSubscriptions(count: number) {
  const deadline = Date.now() + 5_000;
  while (((await api.app.metrics.activeSubscriptions.get()).values[0]?.value ?? 0) !== count) {
    if (Date.now() > deadline) throw new Error(`never ${count} active subscriptions`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('memory held per subscribed socket', () => {
  it('releases the HTTP upgrade request of each socket once connection_init is handled', async () => {
    const requests: Array<WeakRef<IncomingMessage>> = [];
    const remember = (request: IncomingMessage) => requests.push(new WeakRef(request));
    api.app.httpServer.on('upgrade', remember);
    const sockets: RawSocket[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const raw = await openAckedSocket(wsUrl, { authToken: alice });
        raw.send({ id: `s${i}`, type: 'subscribe', payload: { query: SUBSCRIBE, variables: { orgId: 'org-a' } } });
        sockets.push(raw);
      }
      const deadline = Date.now() + 5_000;
      while (((await api.app.metrics.activeSubscriptions.get()).values[0]?.value ?? 0) < 3) {
        if (Date.now() > deadline) throw new Error('the 3 subscriptions never became active');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      // The sockets stay subscribed: the event below still reaches every one of them.
      const title = `memory ${Date.now()}`;
      await api.createAndPublish(alice, 'org-a', title);
      for (const raw of sockets) {
        const next = await raw.next('next');
        expect(next.payload.data.postPublished.title).toBe(title);
      }
      expect(requests).toHaveLength(3);
      expect(await untilCollected(() => requests.every((ref) => ref.deref() === undefined))).toBe(true);
    } finally {
      api.app.httpServer.off('upgrade', remember);
      for (const raw of sockets) raw.socket.close();
    }
  });
});

describe('timers per socket', () => {
  it('keeps no timer per socket once connection_init is handled (keep-alive is one timer per server)', async () => {
    const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
    const before = timers();
    const sockets: RawSocket[] = [];
    try {
      for (let i = 0; i < 12; i++) {
        const raw = await openAckedSocket(wsUrl, { authToken: alice });
        raw.send({ id: `t${i}`, type: 'subscribe', payload: { query: SUBSCRIBE, variables: { orgId: 'org-a' } } });
        sockets.push(raw);
      }
      await untilActiveSubscriptions(12);
      // graphql-ws's useServer kept a ping interval per socket (12 more here); a few unrelated timers may come and go.
      expect(timers() - before).toBeLessThan(4);
    } finally {
      for (const raw of sockets) raw.socket.close();
      await Promise.all(sockets.map((raw) => raw.closed));
    }
  });
});

describe('organisation listeners per shared group', () => {
  it("keeps one listener per group, not one per member, and none once every member's socket is closed", async () => {
    // Counts the live listeners of org-b (no other test here subscribes to it) by wrapping the real
    // history's `listen` and the stop function it returns.
    const history = api.app.pubsub.history;
    const listen = history.listen;
    let live = 0;
    history.listen = async (orgId, listener) => {
      const stop = await listen.call(history, orgId, listener);
      if (orgId !== 'org-b') return stop;
      live += 1;
      let stopped = false;
      return () => {
        if (!stopped) live -= 1;
        stopped = true;
        stop();
      };
    };
    const bob = await api.token({ sub: 'bob', name: 'Bob', orgs: ['org-b'] });
    const sockets: RawSocket[] = [];
    try {
      await untilActiveSubscriptions(0);
      for (let i = 0; i < 3; i++) {
        const raw = await openAckedSocket(wsUrl, { authToken: bob });
        raw.send({ id: `b${i}`, type: 'subscribe', payload: { query: SUBSCRIBE, variables: { orgId: 'org-b' } } });
        sockets.push(raw);
      }
      await untilActiveSubscriptions(3);
      const title = `listeners ${Date.now()}`;
      await api.createAndPublish(bob, 'org-b', title);
      for (const raw of sockets) expect((await raw.next('next')).payload.data.postPublished.title).toBe(title);
      expect(api.app.webSockets.sharedGroups).toBeGreaterThanOrEqual(1);
      expect(live).toBe(1);
      for (const raw of sockets) {
        raw.socket.close();
        await raw.closed;
      }
      const deadline = Date.now() + 5_000;
      while (live > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(live).toBe(0);
    } finally {
      history.listen = listen;
      for (const raw of sockets) raw.socket.close();
    }
  });
});

describe('shedding sockets to rebalance pods', () => {
  it('closes exactly the asked number of open sockets with 1012 and keeps the others', async () => {
    const sockets = await Promise.all([1, 2, 3].map(() => openAckedSocket(wsUrl, { authToken: alice })));
    try {
      expect(api.app.webSockets.shed(2)).toBe(2);
      const outcomes: Array<{ code: number; reason: string } | 'open'> = sockets.map(() => 'open');
      for (const [index, raw] of sockets.entries()) {
        raw.closed.then((closed) => {
          outcomes[index] = closed;
        });
      }
      const closed = () => outcomes.filter((outcome) => outcome !== 'open');
      await waitFor('the shed sockets to close', () => closed().length >= 2, { timeoutMs: 30_000, intervalMs: 20 });
      // A third one shed too would close meanwhile.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(closed()).toEqual([
        { code: 1012, reason: 'Service Restart: rebalancing' },
        { code: 1012, reason: 'Service Restart: rebalancing' },
      ]);
      expect(outcomes.filter((outcome) => outcome === 'open')).toHaveLength(1);
    } finally {
      for (const raw of sockets) raw.socket.close();
    }
  });
});
