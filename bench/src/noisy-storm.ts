/**
 * Organisation A's storm for `pnpm bench --scenarios noisy-neighbour`, in its own process (started at a
 * lower priority by the bench: A's clients are not on the server's machine in real life). One JSON
 * argument says what to do; the counts are printed as one JSON line at the end.
 *
 * - `http`: `loops` keep-alive request loops of `posts(first: 10)` for `durationMs`.
 * - `fanout`: `sockets` graphql-ws subscribers of A's `postPublished`, spread over `socketTokens` (A's
 *   users: one user's sockets are capped), then `loops` loops of createPost + publishPost for
 *   `durationMs`; sockets admitted (acknowledged) and frames received are counted.
 */
import { createClient } from 'graphql-ws';
import { WebSocket } from 'ws';

interface StormOrder {
  mode: 'http' | 'fanout';
  baseUrl: string;
  token: string;
  orgId: string;
  loops: number;
  durationMs: number;
  sockets?: number;
  /** fanout: the tokens the sockets take in turn (default: `token`). */
  socketTokens?: string[];
  /** fanout: stop once this many publishes committed. */
  stopAfter?: number;
}

export interface StormCounts {
  ok: number;
  refused: number;
  failed: number;
  /** fanout: publishes committed, sockets acknowledged, and frames A's subscribers received. */
  published?: number;
  admitted?: number;
  frames?: number;
}

const POSTS = 'query($orgId: ID!) { posts(orgId: $orgId, first: 10) { edges { node { id title } } } }';
const CREATE = 'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }';
const PUBLISH = 'mutation($id: ID!) { publishPost(id: $id) { id } }';
const SUBSCRIBE = 'subscription($orgId: ID!) { postPublished(orgId: $orgId) { id title } }';

const order = JSON.parse(process.argv[2] ?? '{}') as StormOrder;
const counts: StormCounts = { ok: 0, refused: 0, failed: 0 };

async function graphql(query: string, variables: Record<string, unknown>): Promise<{ status: number; body: any }> {
  const response = await fetch(`${order.baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${order.token}` },
    body: JSON.stringify({ query, variables }),
  });
  return { status: response.status, body: await response.json().catch(() => undefined) };
}

function tally(answer: { status: number; body: any }): boolean {
  const code = answer.body?.errors?.[0]?.extensions?.code;
  if (answer.status === 429 || code === 'RATE_LIMITED') counts.refused++;
  else if (answer.status === 200 && !answer.body?.errors) {
    counts.ok++;
    return true;
  } else counts.failed++;
  return false;
}

const done = () => order.stopAfter !== undefined && (counts.published ?? 0) >= order.stopAfter;

async function loop(until: number, step: () => Promise<void>): Promise<void> {
  while (Date.now() < until && !done()) {
    try {
      await step();
    } catch {
      counts.failed++;
    }
  }
}

async function main(): Promise<void> {
  const until = Date.now() + order.durationMs;
  if (order.mode === 'http') {
    await Promise.all(
      Array.from({ length: order.loops }, () =>
        loop(until, async () => {
          tally(await graphql(POSTS, { orgId: order.orgId }));
        }),
      ),
    );
  } else {
    counts.published = 0;
    counts.frames = 0;
    counts.admitted = 0;
    const tokens = order.socketTokens ?? [order.token];
    const clients = Array.from({ length: order.sockets ?? 0 }, (_, i) =>
      createClient({
        url: `${order.baseUrl.replace('http', 'ws')}/graphql`,
        webSocketImpl: WebSocket,
        connectionParams: { authToken: tokens[i % tokens.length] },
        retryAttempts: 0,
        on: {
          connected: () => {
            counts.admitted!++;
          },
        },
      }),
    );
    let subscribed = 0;
    for (const client of clients) {
      client.subscribe(
        { query: SUBSCRIBE, variables: { orgId: order.orgId } },
        {
          next: () => {
            counts.frames!++;
          },
          error: () => {},
          complete: () => {},
        },
      );
      // One connect at a time in small batches: 1,000 sockets in a second or two.
      if (++subscribed % 50 === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    if (clients.length > 0) await new Promise((resolve) => setTimeout(resolve, 1_500));
    let n = 0;
    await Promise.all(
      Array.from({ length: order.loops }, () =>
        loop(until, async () => {
          const created = await graphql(CREATE, { input: { orgId: order.orgId, title: `storm ${n++}` } });
          if (!tally(created)) return;
          if (tally(await graphql(PUBLISH, { id: created.body.data.createPost.id }))) counts.published!++;
        }),
      ),
    );
    // Every committed publish's frame on every admitted socket, or 15 s: what is missing then is reported.
    const drainUntil = Date.now() + 15_000;
    while (counts.frames! < counts.published! * counts.admitted! && Date.now() < drainUntil) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await Promise.all(clients.map((client) => Promise.resolve(client.dispose()).catch(() => {})));
  }
  process.stdout.write(`${JSON.stringify(counts)}\n`);
  process.exit(0);
}

await main();
