import { createHeraldClient, type HeraldClient } from '@herald/client';
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
  /** How many times the token callback was asked. */
  tokenCalls: number;
  cursorExpired: number;
  count(title: string): number;
}

export function subscribeWithHeraldClient(
  url: string,
  token: () => string | Promise<string>,
  orgId: string,
  reconnect = { baseMs: 200, maxMs: 2_000 },
  request: { startAtHead?: boolean } = {},
): AppSubscriber {
  const subscriber: AppSubscriber = {
    client: undefined as unknown as HeraldClient,
    titles: [],
    errors: [],
    reconnects: 0,
    tokenCalls: 0,
    cursorExpired: 0,
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
      if (reconnected) subscriber.reconnects++;
    },
    onCursorExpired: () => {
      subscriber.cursorExpired++;
    },
  });
  subscriber.client.subscribe<{ postPublished: { title: string } }>(
    { query: POST_PUBLISHED_RESUMABLE, variables: { orgId }, ...request },
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
