import { type Client, createClient } from 'graphql-ws';
import { WebSocket } from 'ws';

/** A real graphql-ws client subscribed to `postPublished`, recording the titles it receives. */
export interface Subscriber {
  client: Client;
  titles: string[];
  errors: unknown[];
  /** How many times the socket (re)connected. */
  connections: number;
  count(title: string): number;
}

export function subscribePostPublished(url: string, token: string, orgId: string): Subscriber {
  const subscriber: Subscriber = {
    client: undefined as unknown as Client,
    titles: [],
    errors: [],
    connections: 0,
    count: (title) => subscriber.titles.filter((seen) => seen === title).length,
  };
  subscriber.client = createClient({
    url,
    webSocketImpl: WebSocket,
    connectionParams: { authToken: token },
    // Reconnect like a production client: a pod going away (1012) must not end the subscription.
    retryAttempts: 20,
    shouldRetry: () => true,
    retryWait: () => new Promise((resolve) => setTimeout(resolve, 200)),
    on: { connected: () => subscriber.connections++ },
  });
  subscriber.client.subscribe<{ postPublished: { title: string } }>(
    { query: 'subscription($orgId: ID!) { postPublished(orgId: $orgId) { id title } }', variables: { orgId } },
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
 * Creates and publishes a post through `baseUrl`; returns the HTTP response body of publishPost.
 * Each request on a connection of its own (`connection: close`): tests restart pods behind this, and a
 * pooled keep-alive connection can be closed by a draining or stopped pod just as a request is written on
 * it (ECONNRESET, and the caller can't know whether the mutation ran); a new connection to a pod that is
 * gone is refused instead, which committed nothing.
 */
export async function createAndPublish(baseUrl: string, token: string, orgId: string, title: string) {
  const call = async (query: string, variables: Record<string, unknown>) => {
    const response = await fetch(`${baseUrl}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, connection: 'close' },
      body: JSON.stringify({ query, variables }),
    });
    return (await response.json()) as { data?: any; errors?: unknown[] };
  };
  const created = await call('mutation($input: CreatePostInput!) { createPost(input: $input) { id } }', {
    input: { orgId, title },
  });
  if (!created.data) throw new Error(`createPost failed: ${JSON.stringify(created.errors)}`);
  return call('mutation($id: ID!) { publishPost(id: $id) { id status } }', { id: created.data.createPost.id });
}

/** Reads one un-labelled metric from a pod's /metrics. */
export async function readMetric(baseUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : 0;
}
