import { createHeraldClient, type HeraldClient, type HeraldClientOptions } from '@herald/client';
import { WebSocket } from 'ws';

export const POST_PUBLISHED_RESUMABLE =
  'subscription($orgId: ID!, $after: String) { postPublished(orgId: $orgId, after: $after) { id title } }';

/** An @herald/client subscribed to postPublished, recording what the application sees. */
export interface AppSubscriber {
  client: HeraldClient;
  titles: string[];
  errors: unknown[];
  /** Successful connects after the first. */
  reconnects: number;
  /** Successful connects, the first included. */
  connects: number;
  /** How many times the token callback was asked. */
  tokenCalls: number;
  cursorExpired: number;
  /** Subscriptions the library sent again after a retryable refusal, with the code and the wait. */
  retries: Array<{ code: string; delayMs: number }>;
  count(title: string): number;
}

export function subscribeWithHeraldClient(
  url: string,
  token: () => string | Promise<string>,
  orgId: string,
  reconnect = { baseMs: 200, maxMs: 2_000 },
  request: { startAtHead?: boolean; query?: string } = {},
  clientOptions: Pick<HeraldClientOptions, 'keepAliveMs' | 'pongTimeoutMs' | 'connectTimeoutMs'> = {},
): AppSubscriber {
  const subscriber: AppSubscriber = {
    client: undefined as unknown as HeraldClient,
    titles: [],
    errors: [],
    reconnects: 0,
    connects: 0,
    tokenCalls: 0,
    cursorExpired: 0,
    retries: [],
    count: (title) => subscriber.titles.filter((seen) => seen === title).length,
  };
  subscriber.client = createHeraldClient({
    url,
    webSocketImpl: WebSocket,
    token: () => {
      subscriber.tokenCalls++;
      return token();
    },
    reconnect,
    onConnected: (reconnected) => {
      subscriber.connects++;
      if (reconnected) subscriber.reconnects++;
    },
    onCursorExpired: () => {
      subscriber.cursorExpired++;
    },
    onRetry: (code, delayMs) => subscriber.retries.push({ code, delayMs }),
    ...clientOptions,
  });
  subscriber.client.subscribe<{ postPublished: { title: string } }>(
    { query: request.query ?? POST_PUBLISHED_RESUMABLE, variables: { orgId }, startAtHead: request.startAtHead },
    {
      next: (result) => {
        if (result.errors) subscriber.errors.push(result.errors);
        if (result.data) subscriber.titles.push(result.data.postPublished.title);
      },
      error: (error) => subscriber.errors.push(error),
      complete: () => {},
    },
  );
  return subscriber;
}

/**
 * Publishes warm-up posts (`publish(title)`) until every client has received one, so each holds a cursor
 * to resume from. A pod counts a subscription a moment before it listens, a rebalancing pod may shed a
 * socket meanwhile, and nothing is promised to a subscription before it listens (nor to a client without a
 * cursor while it reconnects): so another warm-up goes out every `everyMs` until every client has one.
 * @returns the warm-up titles, in order; a client's titles start with some suffix of them (see {@link warmUpsSeen})
 */
export async function warmUpClients(
  clients: AppSubscriber[],
  publish: (title: string) => Promise<unknown>,
  { everyMs = 5_000, timeoutMs = 60_000 } = {},
): Promise<string[]> {
  const warmUps: string[] = [];
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const waiting = clients.filter((client) => client.titles.length === 0);
    if (waiting.length === 0) return warmUps;
    if (Date.now() > deadline) {
      throw new Error(`${waiting.length} of ${clients.length} clients got none of ${warmUps.length} warm-up posts`);
    }
    if (warmUps.length > 0) {
      const reconnects = waiting.reduce((total, client) => total + client.reconnects, 0);
      console.log(
        `warm-up: ${waiting.length} clients without an event after ${warmUps.length} (${reconnects} reconnects among them)`,
      );
    }
    const title = `warm-up ${warmUps.length + 1}`;
    await publish(title);
    warmUps.push(title);
    const until = Date.now() + everyMs;
    while (Date.now() < until && clients.some((client) => client.titles.length === 0)) {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

/** The warm-ups `client` should have seen: every one from the first it received (each once, in order). */
export function warmUpsSeen(client: AppSubscriber, warmUps: string[]): string[] {
  return warmUps.slice(warmUps.indexOf(client.titles[0] ?? ''));
}
