import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'vitest';
import { postGraphql } from './graphql-http.js';

/** A webhook receiver on 127.0.0.1 that answers every delivery 204 and keeps the post ids it got. */
export interface WebhookReceiver {
  /** `http://127.0.0.1:<port>/hook` */
  url: string;
  /** `data.id` of every delivery received: the published post's id. */
  received: Set<string>;
  close(): Promise<void>;
}

export async function startWebhookReceiver(): Promise<WebhookReceiver> {
  const received = new Set<string>();
  const server = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk) => {
      body += chunk;
    });
    request.on('end', () => {
      received.add((JSON.parse(body) as { data: { id: string } }).data.id);
      response.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    received,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** Adds a `post.published` endpoint delivering to `url` for `orgId` through the API; fails the test on an error. */
export async function createPostPublishedEndpoint(
  baseUrl: string,
  token: string,
  orgId: string,
  url: string,
): Promise<void> {
  const endpoint = await postGraphql(
    baseUrl,
    token,
    'mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }',
    { input: { orgId, url, eventTypes: ['post.published'] } },
  );
  expect(endpoint.body.errors).toBeUndefined();
}
