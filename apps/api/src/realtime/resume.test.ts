import { randomUUID } from 'node:crypto';
import { subscriptionRedisKeys } from '@herald/contracts';
import { createClient } from 'graphql-ws';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { WebSocket } from 'ws';
import { createApp, type HeraldApp } from '../app.js';
import { startTestApi, type TestApi } from '../testing/test-api.js';
import { decodeCursor } from './cursor.js';

// Resumable subscriptions with two pods on one Redis and one database, real graphql-ws
// clients, and a Redis prefix of this file's own (its keys are the only ones it deletes).

const PREFIX = `herald-resume-${randomUUID()}:`;
const HISTORY_SIZE = 40;
const QUERY =
  'subscription($orgId: ID!, $tags: [String!], $after: String) { postPublished(orgId: $orgId, tags: $tags, after: $after) { title tags } }';

let podA: TestApi;
let podB: { app: HeraldApp; wsUrl: string };
let wsA: string;
const admin = new Redis(inject('redisUrl'), { lazyConnect: true });

beforeAll(async () => {
  podA = await startTestApi({
    databaseUrl: inject('databaseUrl'),
    listen: true,
    env: {
      REDIS_URL: inject('redisUrl'),
      HERALD_REDIS_PREFIX: PREFIX,
      SUBSCRIPTION_HISTORY_SIZE: String(HISTORY_SIZE),
    },
  });
  wsA = `${podA.baseUrl!.replace('http', 'ws')}/graphql`;
  // The second pod: same configuration (database schema, Redis, prefix), its own process state.
  const app = await createApp(podA.config, pino({ level: 'silent' }));
  const address = await app.listen();
  podB = { app, wsUrl: `ws://127.0.0.1:${address.port}/graphql` };
});

afterAll(async () => {
  await podB?.app.stop();
  await podA?.close();
  const keys = await admin.keys(`${PREFIX}*`);
  if (keys.length > 0) await admin.del(...keys);
  admin.disconnect();
});

interface Received {
  title: string;
  tags: string[];
  cursor: string;
}

/** A real graphql-ws client subscribed to postPublished; records events and errors. */
function subscribe(url: string, token: string, variables: Record<string, unknown>) {
  const events: Received[] = [];
  const errors: Array<{ message: string; extensions?: Record<string, unknown> }> = [];
  let completed = false;
  const client = createClient({
    url,
    webSocketImpl: WebSocket,
    connectionParams: { authToken: token },
    retryAttempts: 0,
  });
  client.subscribe<{ postPublished: { title: string; tags: string[] } }>(
    { query: QUERY, variables },
    {
      next: (result) => {
        if (result.errors) errors.push(...(result.errors as typeof errors));
        if (result.data)
          events.push({
            ...result.data.postPublished,
            cursor: String((result.extensions as { cursor?: string } | undefined)?.cursor ?? ''),
          });
      },
      error: (error) => errors.push(...(Array.isArray(error) ? error : [{ message: String(error) }])),
      complete: () => {
        completed = true;
      },
    },
  );
  return {
    events,
    errors,
    titles: () => events.map((event) => event.title),
    get completed() {
      return completed;
    },
    dispose: () => client.dispose(),
  };
}

async function active(app: HeraldApp): Promise<number> {
  return (await app.metrics.activeSubscriptions.get()).values[0]?.value ?? 0;
}

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Creates and publishes a post through `app` (its Yoga, no socket). */
async function publishVia(app: HeraldApp, token: string, orgId: string, title: string, tags: string[] = []) {
  const call = async (query: string, variables: Record<string, unknown>) => {
    const response = await app.yoga.fetch('http://herald.test/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query, variables }),
    });
    const body = (await response.json()) as { data?: any; errors?: unknown };
    if (body.errors) throw new Error(JSON.stringify(body.errors));
    return body.data;
  };
  const created = await call('mutation($input: CreatePostInput!) { createPost(input: $input) { id } }', {
    input: { orgId, title, tags },
  });
  await call('mutation($id: ID!) { publishPost(id: $id) { id } }', { id: created.createPost.id });
}

const positions = (events: Received[], orgId: string) =>
  events.map((event) => decodeCursor(event.cursor, orgId).position);

describe('resuming postPublished across pods', () => {
  it('replays exactly the missed events on another pod, then goes live: no gap, no repeat while publishing continues', async () => {
    const org = `org-${randomUUID()}`;
    const token = await podA.token({ sub: 'writer', name: 'Writer', orgs: [org] });
    const activeA = await active(podA.app);
    const first = subscribe(wsA, token, { orgId: org });
    await until('the first subscription', async () => (await active(podA.app)) === activeA + 1);
    for (let i = 1; i <= 5; i++) await publishVia(podA.app, token, org, `read ${i}`);
    await until('5 events', () => first.events.length === 5);
    expect(first.titles()).toEqual(['read 1', 'read 2', 'read 3', 'read 4', 'read 5']);
    const cursor = first.events[4]!.cursor;
    await first.dispose();

    for (let i = 1; i <= 5; i++) await publishVia(podB.app, token, org, `missed ${i}`);
    // A live subscriber on pod B with the same selection: its shared group is the one to join after catch-up.
    const activeB = await active(podB.app);
    const watcher = subscribe(podB.wsUrl, token, { orgId: org });
    await until('the watcher', async () => (await active(podB.app)) === activeB + 1);
    const groupsWithWatcher = podB.app.webSockets.sharedGroups;
    // Publishing goes on, alternating pods, before, during and after the resume's replay.
    const concurrent = (async () => {
      for (let i = 1; i <= 20; i++) await publishVia(i % 2 ? podA.app : podB.app, token, org, `during ${i}`);
    })();
    const resumed = subscribe(podB.wsUrl, token, { orgId: org, after: cursor });
    await concurrent;
    await until('25 events on the resumed subscription', () => resumed.events.length >= 25);
    await publishVia(podA.app, token, org, 'live');
    await until('the live event', () => resumed.events.length >= 26);
    expect(resumed.errors).toEqual([]);
    expect(resumed.titles()).toEqual([
      ...Array.from({ length: 5 }, (_, i) => `missed ${i + 1}`),
      ...Array.from({ length: 20 }, (_, i) => `during ${i + 1}`),
      'live',
    ]);
    expect(positions(resumed.events, org)).toEqual(Array.from({ length: 26 }, (_, i) => 6 + i));
    // At least the 5 missed before the resume came from the history, and were counted so.
    expect((await podB.app.metrics.eventsReplayed.get()).values[0]?.value).toBeGreaterThanOrEqual(5);
    // Caught up, the resumed subscription shares the watcher's group instead of running on its own.
    expect(podB.app.webSockets.sharedGroups).toBe(groupsWithWatcher);
    await until('the watcher to see the live event', () => watcher.titles().includes('live'));
    expect(watcher.titles()).toEqual([...Array.from({ length: 20 }, (_, i) => `during ${i + 1}`), 'live']);
    await Promise.all([resumed.dispose(), watcher.dispose()]);
  });

  it('applies the tags filter on replay and live', async () => {
    const org = `org-${randomUUID()}`;
    const token = await podA.token({ sub: 'writer', name: 'Writer', orgs: [org] });
    const before = await active(podA.app);
    const first = subscribe(wsA, token, { orgId: org });
    await until('the subscription', async () => (await active(podA.app)) === before + 1);
    await publishVia(podA.app, token, org, 'start');
    await until('the first event', () => first.events.length === 1);
    await first.dispose();
    await publishVia(podA.app, token, org, 'x 1', ['x']);
    await publishVia(podA.app, token, org, 'y 1', ['y']);
    await publishVia(podA.app, token, org, 'x 2', ['x', 'z']);
    const tagged = subscribe(podB.wsUrl, token, { orgId: org, tags: ['x'], after: first.events[0]!.cursor });
    await until('the replay', () => tagged.events.length === 2);
    await publishVia(podB.app, token, org, 'y 2', ['y']);
    await publishVia(podB.app, token, org, 'x 3', ['x']);
    await until('the live tagged event', () => tagged.events.length === 3);
    expect(tagged.titles()).toEqual(['x 1', 'x 2', 'x 3']);
    await tagged.dispose();
  });

  it("refuses another organisation's cursor (CURSOR_EXPIRED) and a non-member's subscribe (FORBIDDEN), replaying nothing", async () => {
    const orgA = `org-${randomUUID()}`;
    const orgB = `org-${randomUUID()}`;
    const both = await podA.token({ sub: 'both', name: 'Both', orgs: [orgA, orgB] });
    const onlyB = await podA.token({ sub: 'only-b', name: 'Only B', orgs: [orgB] });
    const before = await active(podA.app);
    const first = subscribe(wsA, both, { orgId: orgA });
    await until('the subscription', async () => (await active(podA.app)) === before + 1);
    await publishVia(podA.app, both, orgA, 'secret 1');
    await until('the event', () => first.events.length === 1);
    await publishVia(podA.app, both, orgA, 'secret 2');
    await first.dispose();
    const cursor = first.events[0]!.cursor;

    const foreign = subscribe(wsA, both, { orgId: orgB, after: cursor });
    const outsider = subscribe(wsA, onlyB, { orgId: orgA, after: cursor });
    await until('both refusals', () => foreign.errors.length > 0 && outsider.errors.length > 0);
    expect(foreign.errors[0]?.extensions?.code).toBe('CURSOR_EXPIRED');
    expect(outsider.errors[0]?.extensions?.code).toBe('FORBIDDEN');
    expect([...foreign.events, ...outsider.events]).toEqual([]);
    await Promise.all([foreign.dispose(), outsider.dispose()]);
  });
});

describe('postPublishedCursor: a cursor before the first event', () => {
  const HEAD = 'query($orgId: ID!) { postPublishedCursor(orgId: $orgId) }';

  it('resumes from the moment it was asked, also for an organisation without any event yet, on any pod', async () => {
    const org = `org-${randomUUID()}`;
    const token = await podA.token({ sub: 'writer', name: 'Writer', orgs: [org] });
    const [activeA, activeB] = [await active(podA.app), await active(podB.app)];
    const empty = await podA.graphql(HEAD, { orgId: org }, token);
    expect(empty.body.errors).toBeUndefined();
    const head = empty.body.data.postPublishedCursor as string;
    expect(decodeCursor(head, org).position).toBe(0);
    // Published before anyone subscribed: a client holding only the head cursor still gets them.
    await publishVia(podB.app, token, org, 'first');
    await publishVia(podA.app, token, org, 'second');
    const resumed = subscribe(podB.wsUrl, token, { orgId: org, after: head });
    await until('the replay', () => resumed.events.length === 2);
    const later = await podA.graphql(HEAD, { orgId: org }, token);
    const laterHead = later.body.data.postPublishedCursor as string;
    expect(decodeCursor(laterHead, org).position).toBe(2);
    const fromLater = subscribe(wsA, token, { orgId: org, after: laterHead });
    await publishVia(podA.app, token, org, 'third');
    await until('the live event', () => resumed.events.length === 3 && fromLater.events.length === 1);
    expect(resumed.titles()).toEqual(['first', 'second', 'third']);
    expect(fromLater.titles()).toEqual(['third']);
    expect(resumed.errors).toEqual([]);
    await Promise.all([resumed.dispose(), fromLater.dispose()]);
    // Gone on the server too before the next test counts subscriptions.
    await until('the subscriptions to end', async () => (await active(podA.app)) === activeA);
    await until('the subscriptions to end', async () => (await active(podB.app)) === activeB);
  });

  it("is refused for an organisation you don't belong to", async () => {
    const outsider = await podA.token({ sub: 'outsider', name: 'Outsider', orgs: ['org-other'] });
    const refused = await podA.graphql(HEAD, { orgId: `org-${randomUUID()}` }, outsider);
    expect(refused.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN');
  });
});

describe('cursors the server cannot honour: an error message with CURSOR_EXPIRED, no stream', () => {
  let org: string;
  let token: string;
  let cursor: string;

  beforeAll(async () => {
    org = `org-${randomUUID()}`;
    token = await podA.token({ sub: 'writer', name: 'Writer', orgs: [org] });
    const before = await active(podA.app);
    const first = subscribe(wsA, token, { orgId: org });
    await until('the subscription', async () => (await active(podA.app)) === before + 1);
    await publishVia(podA.app, token, org, 'kept');
    await until('the event', () => first.events.length === 1);
    cursor = first.events[0]!.cursor;
    await first.dispose();
    await until('no subscription', async () => (await active(podA.app)) === before);
  });

  async function expectExpired(after: string) {
    const before = await active(podA.app);
    const refused = subscribe(wsA, token, { orgId: org, after });
    await until('the refusal', () => refused.errors.length > 0);
    expect(refused.errors.map((error) => error.extensions?.code)).toEqual(['CURSOR_EXPIRED']);
    expect(refused.events).toEqual([]);
    // An `error` message ends the subscription without a `complete`, and no stream was counted.
    expect(refused.completed).toBe(false);
    expect(await active(podA.app)).toBe(before);
    await refused.dispose();
  }

  it('malformed cursors', async () => {
    for (const bad of ['garbage', 'x', '!!!', Buffer.from('v1:e:NaN:org').toString('base64url'), 'a'.repeat(5_000)])
      await expectExpired(bad);
  });

  it('a cursor older than the history (trimmed)', async () => {
    for (let i = 1; i <= HISTORY_SIZE + 1; i++) await publishVia(podA.app, token, org, `filler ${i}`);
    await expectExpired(cursor);
  });

  it('a cursor of a history that was flushed, never the new history’s events', async () => {
    // Live before the publish (the count is read before subscribing: read after, the wait was a no-op).
    const before = await active(podA.app);
    const live = subscribe(wsA, token, { orgId: org });
    await until('the subscription', async () => (await active(podA.app)) === before + 1);
    await publishVia(podA.app, token, org, 'before flush');
    await until('the event', () => live.events.some((event) => event.title === 'before flush'));
    const recent = live.events.at(-1)!.cursor;
    const keys = subscriptionRedisKeys(PREFIX, org);
    await admin.del(keys.history, keys.meta, keys.ids);
    await expectExpired(recent);
    await publishVia(podA.app, token, org, 'after flush');
    await expectExpired(recent);
    // Live subscribers go on receiving the new history's events.
    await until('the live event after the flush', () => live.events.some((event) => event.title === 'after flush'));
    await live.dispose();
  });
});

describe('resuming in embedded mode (PGlite, in-process history)', () => {
  it('replays the missed events after a cursor, then goes live', async () => {
    const embedded = await startTestApi({ listen: true });
    try {
      const url = `${embedded.baseUrl!.replace('http', 'ws')}/graphql`;
      const token = await embedded.token({ sub: 'writer', name: 'Writer', orgs: ['org-e'] });
      const before = await active(embedded.app);
      const first = subscribe(url, token, { orgId: 'org-e' });
      await until('the subscription', async () => (await active(embedded.app)) === before + 1);
      await embedded.createAndPublish(token, 'org-e', 'seen');
      await until('the first event', () => first.events.length === 1);
      await first.dispose();
      await embedded.createAndPublish(token, 'org-e', 'missed 1');
      await embedded.createAndPublish(token, 'org-e', 'missed 2');
      const resumed = subscribe(url, token, { orgId: 'org-e', after: first.events[0]!.cursor });
      await until('the replay', () => resumed.events.length === 2);
      await embedded.createAndPublish(token, 'org-e', 'live');
      await until('the live event', () => resumed.events.length === 3);
      expect(resumed.titles()).toEqual(['missed 1', 'missed 2', 'live']);
      await resumed.dispose();
    } finally {
      await embedded.close();
    }
  });
});
