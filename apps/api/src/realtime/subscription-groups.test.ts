import { randomUUID } from 'node:crypto';
import type { ExecutionResult } from 'graphql';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import type { Context } from '../context.js';
import { createApiMetrics } from '../metrics.js';
import { schema as heraldSchema } from '../schema/index.js';
import { openAckedSocket, type RawSocket } from '../testing/raw-socket.js';
import { startTestApi, type TestApi } from '../testing/test-api.js';
import { BROADCAST_SLICE } from './subscription-broadcast.js';
import { createSubscriptionGroups } from './subscription-groups.js';

let api: TestApi;
let wsUrl: string;
let alice: string; // org-a
let bob: string; // org-b
let carol: string; // org-a and org-b

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl'), listen: true });
  wsUrl = `${api.baseUrl!.replace('http', 'ws')}/graphql`;
  alice = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-a'] });
  bob = await api.token({ sub: 'bob', name: 'Bob', orgs: ['org-b'] });
  carol = await api.token({ sub: 'carol', name: 'Carol', orgs: ['org-a', 'org-b'] });
});

afterAll(() => api.close());

const publish = (token: string, orgId: string, title: string, tags: string[] = []) =>
  api.createAndPublish(token, orgId, title, tags);

async function subscribe(token: string, query: string, variables?: Record<string, unknown>, id = randomUUID()) {
  const raw = await openAckedSocket(wsUrl, { authToken: token });
  raw.send({ id, type: 'subscribe', payload: { query, variables } });
  return { raw, id };
}

async function activeSubscriptions(): Promise<number> {
  return (await api.app.metrics.activeSubscriptions.get()).values[0]?.value ?? 0;
}

async function until(what: string, check: () => boolean | Promise<boolean>) {
  const deadline = Date.now() + 5_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const closeAll = (sockets: RawSocket[]) => {
  for (const socket of sockets) socket.socket.close();
};

describe('shared execution', () => {
  it('identical subscriptions on different sockets share one group and each gets its own id', async () => {
    const query = 'subscription { postPublished(orgId: "org-a") { id title author { name } } }';
    const before = await activeSubscriptions();
    const subscribers = await Promise.all([subscribe(alice, query), subscribe(carol, query), subscribe(alice, query)]);
    await until('3 subscriptions', async () => (await activeSubscriptions()) === before + 3);
    expect(api.app.webSockets.sharedGroups).toBe(1);
    expect((await api.app.metrics.subscriptionGroups.get()).values[0]?.value).toBe(1);
    const postId = await publish(alice, 'org-a', 'shared');
    for (const { raw, id } of subscribers) {
      const next = await raw.next('next');
      expect(next).toEqual({
        id,
        type: 'next',
        payload: {
          data: { postPublished: { id: postId, title: 'shared', author: { name: 'Alice' } } },
          extensions: { cursor: expect.any(String) },
        },
      });
    }
    closeAll(subscribers.map((s) => s.raw));
    await until('the group to end', () => api.app.webSockets.sharedGroups === 0);
    // herald_subscription_groups_active follows the groups down too.
    expect((await api.app.metrics.subscriptionGroups.get()).values[0]?.value).toBe(0);
  });

  it('different selections and variables each get their own result', async () => {
    const byTitle = await subscribe(alice, 'subscription { postPublished(orgId: "org-a") { title } }');
    const byAuthor = await subscribe(alice, 'subscription { postPublished(orgId: "org-a") { author { name } } }');
    const tagged = 'subscription($tags: [String!]) { postPublished(orgId: "org-a", tags: $tags) { title tags } }';
    const tagA = await subscribe(carol, tagged, { tags: ['a'] });
    const tagB = await subscribe(carol, tagged, { tags: ['b'] });
    await until('4 groups', () => api.app.webSockets.sharedGroups === 4);

    await publish(alice, 'org-a', 'only b', ['b']);
    await publish(alice, 'org-a', 'only a', ['a']);
    expect((await byTitle.raw.next('next')).payload.data).toEqual({ postPublished: { title: 'only b' } });
    expect((await byAuthor.raw.next('next')).payload.data).toEqual({ postPublished: { author: { name: 'Alice' } } });
    expect((await tagA.raw.next('next')).payload.data.postPublished).toEqual({ title: 'only a', tags: ['a'] });
    expect((await tagB.raw.next('next')).payload.data.postPublished).toEqual({ title: 'only b', tags: ['b'] });
    closeAll([byTitle.raw, byAuthor.raw, tagA.raw, tagB.raw]);
  });

  it('the same document for another org is another group, and a non-member is refused, not grouped', async () => {
    const query = 'subscription($orgId: ID!) { postPublished(orgId: $orgId) { title orgId } }';
    const inA = await subscribe(alice, query, { orgId: 'org-a' });
    const inB = await subscribe(bob, query, { orgId: 'org-b' });
    const intruder = await subscribe(bob, query, { orgId: 'org-a' });
    const refusal = await intruder.raw.next();
    const errors = refusal.type === 'error' ? refusal.payload : refusal.payload.errors;
    expect(errors[0].extensions.code).toBe('FORBIDDEN');

    await publish(alice, 'org-a', 'for a');
    await publish(bob, 'org-b', 'for b');
    expect((await inA.raw.next('next')).payload.data.postPublished).toEqual({ title: 'for a', orgId: 'org-a' });
    expect((await inB.raw.next('next')).payload.data.postPublished).toEqual({ title: 'for b', orgId: 'org-b' });
    intruder.raw.send({ type: 'ping' });
    await intruder.raw.next('pong');
    expect(intruder.raw.received.filter((message) => message.type === 'next' && message.payload.data)).toEqual([]);
    closeAll([inA.raw, inB.raw, intruder.raw]);
  });

  it('keeps serving the group after the member whose stream it uses leaves (token expiry)', async () => {
    const query = 'subscription { postPublished(orgId: "org-a") { title } }';
    const shortLived = await api.token(
      { sub: 'alice', orgs: ['org-a'] },
      { expiresIn: Math.floor(Date.now() / 1000) + 2 },
    );
    const first = await subscribe(shortLived, query);
    const second = await subscribe(carol, query);
    await until('one group of two', async () => api.app.webSockets.sharedGroups === 1);
    expect((await first.raw.closed).code).toBe(4403);
    await publish(alice, 'org-a', 'after the first left');
    expect((await second.raw.next('next')).payload.data.postPublished.title).toBe('after the first left');
    closeAll([second.raw]);
  });

  it('still runs each event as a fresh execution for the whole group', async () => {
    const query = 'subscription { postPublished(orgId: "org-b") { author { name } } }';
    const members = await Promise.all([subscribe(bob, query), subscribe(carol, query)]);
    await until('the group', () => api.app.webSockets.sharedGroups === 1);
    await publish(bob, 'org-b', 'one');
    for (const { raw } of members) expect((await raw.next('next')).payload.data.postPublished.author.name).toBe('Bob');
    await publish(await api.token({ sub: 'bob', name: 'Robert', orgs: ['org-b'] }), 'org-b', 'two');
    for (const { raw } of members)
      expect((await raw.next('next')).payload.data.postPublished.author.name).toBe('Robert');
    closeAll(members.map((m) => m.raw));
  });

  it('closes a consumer that stops reading once its send buffer passes the limit, and counts it', async () => {
    const query = 'subscription { postPublished(orgId: "org-a") { title } }';
    const reader = await subscribe(alice, query);
    const stalled = await subscribe(alice, query);
    await until('one group', () => api.app.webSockets.sharedGroups === 1);
    // Stop reading from the TCP socket: the server's send buffer for it can only grow.
    (stalled.raw.socket as unknown as { _socket: { pause(): void } })._socket.pause();
    const bigTitle = 'x'.repeat(256 * 1024);
    const { rows } = await (await import('kysely')).sql<{ id: string }>`select id from users limit 1`.execute(
      api.app.database.db,
    );
    for (let i = 0; i < 200 && stalled.raw.socket.readyState === WebSocket.OPEN; i++) {
      api.app.pubsub.publishPostPublished({
        id: `big-${i}`,
        seq: String(i),
        org_id: 'org-a',
        author_id: rows[0]!.id,
        title: bigTitle,
        tags: [],
        status: 'PUBLISHED',
        created_at: new Date(),
        published_at: new Date(),
      });
      await new Promise((resolve) => setTimeout(resolve, 10));
      if ((await api.app.metrics.slowConsumersClosed.get()).values[0]?.value) break;
    }
    expect((await api.app.metrics.slowConsumersClosed.get()).values[0]?.value).toBeGreaterThanOrEqual(1);
    expect(reader.raw.socket.readyState).toBe(WebSocket.OPEN);
    (stalled.raw.socket as unknown as { _socket: { resume(): void } })._socket.resume();
    expect((await stalled.raw.closed).code).toBe(1013);
    closeAll([reader.raw]);
  });
});

describe('a group on its own (fake sockets, real groups)', () => {
  type FakeSocket = { OPEN: 1; readyState: number; bufferedAmount: number; sent: string[]; send(data: string): void };
  const fakeSocket = (readyState = 1): FakeSocket => ({
    OPEN: 1,
    readyState,
    bufferedAmount: 0,
    sent: [],
    send(data: string) {
      this.sent.push(data);
    },
  });
  const groupsFor = (metrics = createApiMetrics()) =>
    createSubscriptionGroups({ schema: heraldSchema, metrics, maxBufferedBytes: 1024 });
  const context = () => ({}) as Context;

  /** A stream yielding `results`, then failing with `failure` (or ending). */
  async function* stream(results: ExecutionResult[], failure?: Error): AsyncGenerator<ExecutionResult> {
    for (const result of results) yield result;
    if (failure) throw failure;
  }

  it('ends every member with an error (SUBSCRIPTION_INTERRUPTED) when its stream fails, never a plain complete', async () => {
    const groups = groupsFor();
    const sockets = [fakeSocket(), fakeSocket()];
    const members = sockets.map((socket, index) =>
      groups.join(
        'key',
        { socket: socket as unknown as WebSocket, id: `m${index}` },
        stream([], new Error('redis gone')),
        context(),
      ),
    );
    for (const member of members)
      await expect(member.next()).rejects.toMatchObject({ extensions: { code: 'SUBSCRIPTION_INTERRUPTED' } });
    expect(groups.size).toBe(0);
  });

  it("executes without its first member's viewer", async () => {
    const groups = groupsFor();
    const socket = fakeSocket();
    const first = { viewer: { id: 'alice', orgs: ['org-a'] } } as unknown as Context;
    async function* seesViewer(): AsyncGenerator<ExecutionResult> {
      yield { data: { viewer: first.viewer?.id ?? null } };
    }
    const member = groups.join('key', { socket: socket as unknown as WebSocket, id: 'a' }, seesViewer(), first);
    await member.next();
    expect(socket.sent.map((frame) => JSON.parse(frame).payload)).toEqual([{ data: { viewer: null } }]);
  });

  it('counts in eventsDelivered only the frames it sent', async () => {
    const metrics = createApiMetrics();
    const groups = groupsFor(metrics);
    const open = fakeSocket();
    const closed = fakeSocket(3);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    async function* gated(): AsyncGenerator<ExecutionResult> {
      await gate;
      yield { data: { postPublished: { title: 'one' } } };
    }
    const first = groups.join('key', { socket: open as unknown as WebSocket, id: 'a' }, gated(), context());
    const second = groups.join('key', { socket: closed as unknown as WebSocket, id: 'b' }, stream([]), context());
    release();
    await Promise.all([first.next(), second.next()]);
    expect(open.sent).toHaveLength(1);
    expect(closed.sent).toHaveLength(0);
    expect((await metrics.eventsDelivered.get()).values[0]?.value).toBe(1);
  });

  it("writes a large group's event over several turns of the event loop: another group's event goes out between them, and every member gets each event once, in order", async () => {
    const groups = groupsFor();
    /** Every frame sent by any socket, in order: [group, member, title]. */
    const sent: Array<[string, number, string]> = [];
    const loggingSocket = (group: string, index: number) => ({
      ...fakeSocket(),
      send(data: string) {
        sent.push([group, index, JSON.parse(data).payload.data.postPublished.title]);
      },
    });
    const gate = () => {
      let open!: () => void;
      const opened = new Promise<void>((resolve) => {
        open = resolve;
      });
      return { open, opened };
    };
    const large = gate();
    const small = gate();
    async function* largeStream(): AsyncGenerator<ExecutionResult> {
      await large.opened;
      for (const title of ['one', 'two', 'three']) yield { data: { postPublished: { title } } };
    }
    async function* smallStream(): AsyncGenerator<ExecutionResult> {
      await small.opened;
      yield { data: { postPublished: { title: 'b' } } };
    }
    const size = 2 * BROADCAST_SLICE + 50;
    for (let index = 0; index < size; index++) {
      const socket = loggingSocket('a', index) as unknown as WebSocket;
      groups.join('a', { socket, id: `a${index}` }, index === 0 ? largeStream() : stream([]), context());
    }
    groups.join('b', { socket: loggingSocket('b', 0) as unknown as WebSocket, id: 'b0' }, smallStream(), context());
    large.open();
    small.open();
    await until('every frame', () => sent.length === 3 * size + 1);

    const firstEventEnds = sent.findLastIndex(([group, , title]) => group === 'a' && title === 'one');
    const b = sent.findIndex(([group]) => group === 'b');
    // Not after the large group's whole fan-out of its first event: after its first slice.
    expect(b).toBeGreaterThanOrEqual(BROADCAST_SLICE);
    expect(b).toBeLessThan(firstEventEnds);
    for (let index = 0; index < size; index++) {
      const titles = sent.filter(([group, member]) => group === 'a' && member === index).map(([, , title]) => title);
      expect(titles).toEqual(['one', 'two', 'three']);
    }
  });

  it('gives a member that joins while a sliced broadcast is under way that event once, then the next ones', async () => {
    const groups = groupsFor();
    const titles = new Map<string, string[]>();
    const socketFor = (id: string, onSend?: () => void) => ({
      ...fakeSocket(),
      send(data: string) {
        const list = titles.get(id) ?? [];
        list.push(JSON.parse(data).payload.data.postPublished.title);
        titles.set(id, list);
        onSend?.();
      },
    });
    let open!: () => void;
    const opened = new Promise<void>((resolve) => {
      open = resolve;
    });
    async function* events(): AsyncGenerator<ExecutionResult> {
      await opened;
      for (const title of ['one', 'two']) yield { data: { postPublished: { title } } };
    }
    const size = 2 * BROADCAST_SLICE;
    let joined = false;
    let lastMemberFramesAtJoin = -1;
    // Joins from the event loop's next turn after the first frame: between the first and second slice.
    const joinLate = () => {
      if (joined) return;
      joined = true;
      setImmediate(() => {
        lastMemberFramesAtJoin = titles.get(`a${size - 1}`)?.length ?? 0;
        groups.join('a', { socket: socketFor('late') as unknown as WebSocket, id: 'late' }, stream([]), context());
      });
    };
    for (let index = 0; index < size; index++) {
      const id = `a${index}`;
      const socket = socketFor(id, index === 0 ? joinLate : undefined) as unknown as WebSocket;
      groups.join('a', { socket, id }, index === 0 ? events() : stream([]), context());
    }
    open();
    await until('every frame', () => titles.get('late')?.length === 2 && titles.get(`a${size - 1}`)?.length === 2);
    // It joined mid-broadcast: the group's last member had not been sent the first event yet.
    expect(lastMemberFramesAtJoin).toBe(0);
    expect(titles.get('late')).toEqual(['one', 'two']);
    expect(titles.get('a0')).toEqual(['one', 'two']);
  });

  it('writes frames a real ws client reads, whatever their length, never ahead of a message ws is still compressing', async () => {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: true });
    await new Promise((resolve) => server.once('listening', resolve));
    const accepted = new Promise<WebSocket>((resolve) => server.once('connection', resolve));
    const client = new WebSocket(`ws://127.0.0.1:${(server.address() as { port: number }).port}`);
    const received: string[] = [];
    client.on('message', (data) => received.push(String(data)));
    try {
      const socket = await accepted;
      // The three WebSocket length encodings (7-bit, 16-bit, 64-bit), a non-ASCII id and title.
      const titles = ['a', 'é'.repeat(200), 'x'.repeat(70_000)];
      const results = titles.map((title) => ({ data: { postPublished: { title } } }));
      const compressed = 'z'.repeat(10_000);
      async function* stream(): AsyncGenerator<ExecutionResult> {
        // ws compresses this on the thread pool: the group's frames, written meanwhile, must wait for it.
        socket.send(compressed, { compress: true });
        yield* results;
      }
      const groups = createSubscriptionGroups({
        schema: heraldSchema,
        metrics: createApiMetrics(),
        maxBufferedBytes: 2 ** 20,
      });
      const member = groups.join('key', { socket, id: 'ü-1' }, stream(), context());
      const ended = member.next();
      const deadline = Date.now() + 5_000;
      while (received.length < titles.length + 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      expect(received[0]).toBe(compressed);
      expect(received.slice(1).map((frame) => JSON.parse(frame))).toEqual(
        results.map((payload) => ({ id: 'ü-1', type: 'next', payload })),
      );
      await member.return?.();
      await expect(ended).resolves.toEqual({ done: true, value: undefined });
    } finally {
      client.close();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
