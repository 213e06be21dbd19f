import { request } from 'node:http';
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
 * POSTs a JSON body on a connection of its own, closed after the answer, and parses the answer as JSON.
 * Not `fetch`: it takes a socket from the process-wide keep-alive pool (the `/metrics` reads' idle ones too), and
 * `connection: close` only closes that socket after the request, so a request could still be written on an idle
 * socket the pod was closing just then ("other side closed": the caller can't know whether the mutation ran).
 * A new connection to a pod that is gone is refused instead, which committed nothing. A failure rejects with
 * the socket's error as `cause` (`cause.code`, as fetch's).
 */
export function postJson(url: string, headers: Record<string, string>, body: string): Promise<any> {
  return new Promise((resolve, reject) => {
    const fail = (error: Error) => reject(new Error(`POST ${url} failed: ${error.message}`, { cause: error }));
    const req = request(
      url,
      {
        method: 'POST',
        agent: false,
        headers: { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8').on('data', (chunk: string) => {
          text += chunk;
        });
        response.on('error', fail);
        response.on('end', () => {
          try {
            resolve(JSON.parse(text));
          } catch {
            reject(
              new Error(`POST ${url}: HTTP ${response.statusCode} with a body that is not JSON: ${text.slice(0, 200)}`),
            );
          }
        });
      },
    );
    req.on('error', fail);
    req.end(body);
  });
}

/**
 * Creates and publishes a post through `baseUrl`; returns the HTTP response body of publishPost.
 * Each request on a connection of its own ({@link postJson}): tests restart pods behind this.
 */
export async function createAndPublish(baseUrl: string, token: string, orgId: string, title: string) {
  const call = (query: string, variables: Record<string, unknown>): Promise<{ data?: any; errors?: unknown[] }> =>
    postJson(`${baseUrl}/graphql`, { authorization: `Bearer ${token}` }, JSON.stringify({ query, variables }));
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
