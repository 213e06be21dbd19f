import { WebSocket } from 'ws';
import { createHeraldClient, type HeraldClient, readCursor } from '../../packages/client/src/index.js';
import { postGraphql } from './http.js';
import type { SubscriberFrame } from './ledger.js';

export const SUBSCRIPTION =
  'subscription($orgId: ID!, $tags: [String!], $after: String) { postPublished(orgId: $orgId, tags: $tags, after: $after) { id title tags } }';
const CREATE_POST = 'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }';
const PUBLISH_POST = 'mutation($id: ID!) { publishPost(id: $id) { id status } }';
export const POSTS_QUERY =
  'query($orgId: ID!, $first: Int) { posts(orgId: $orgId, first: $first) { edges { node { id } } } }';
export const TAGS = ['red', 'green', 'blue'] as const;

/** An @herald/client subscriber of the soak and what it saw. */
export interface SoakSubscriber {
  name: string;
  orgId: string;
  tags: string[] | undefined;
  /** Drops its socket now and then on purpose (the client resumes from its cursor). */
  reconnecting: boolean;
  client: HeraldClient;
  startedAt: number;
  frames: SubscriberFrame[];
  /** Post ids learned from `posts` after CURSOR_EXPIRED (the application's reconciliation). */
  reconciled: Set<string>;
  /** For each CURSOR_EXPIRED: how many frames had arrived before it. */
  expiries: number[];
  reconnects: number;
  errors: string[];
  /** Drops the socket (graphql-ws reconnects and the client resumes with its last cursor). */
  dropSocket(): void;
}

export function startSubscriber(options: {
  name: string;
  wsUrl: string;
  httpUrl: () => string;
  token: string;
  orgId: string;
  tags?: string[];
  reconnecting?: boolean;
  onFrame?: (postId: string, at: number) => void;
}): SoakSubscriber {
  let reconcileOnNextFrame = false;
  const reconcile = async () => {
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        const result = await postGraphql(options.httpUrl(), options.token, POSTS_QUERY, {
          orgId: options.orgId,
          first: 100,
        });
        if (result.data) {
          for (const edge of result.data.posts.edges as { node: { id: string } }[])
            subscriber.reconciled.add(edge.node.id);
          return;
        }
      } catch {
        // retried below
      }
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
    subscriber.errors.push('reconciliation with posts failed 5 times');
  };
  const subscriber: SoakSubscriber = {
    name: options.name,
    orgId: options.orgId,
    tags: options.tags,
    reconnecting: options.reconnecting ?? false,
    client: undefined as unknown as HeraldClient,
    startedAt: Date.now(),
    frames: [],
    reconciled: new Set(),
    expiries: [],
    reconnects: 0,
    errors: [],
    dropSocket: () => {
      // Only an open socket: ws throws an unhandled 'error' when one still connecting is terminated.
      if (connected) subscriber.client.graphqlWs.terminate();
    },
  };
  let connected = false;
  subscriber.client = createHeraldClient({
    url: options.wsUrl,
    webSocketImpl: WebSocket,
    token: () => options.token,
    reconnect: { baseMs: 200, maxMs: 3_000 },
    onConnected: (reconnected) => {
      if (reconnected) subscriber.reconnects++;
    },
    onCursorExpired: async () => {
      subscriber.expiries.push(subscriber.frames.length);
      // What the application missed: the newest posts now, and once more after the next live event
      // (what was committed between this answer and the new subscription).
      reconcileOnNextFrame = true;
      await reconcile();
    },
  });
  subscriber.client.graphqlWs.on('connected', () => {
    connected = true;
  });
  subscriber.client.graphqlWs.on('closed', () => {
    connected = false;
  });
  subscriber.client.subscribe<{ postPublished: { id: string } }>(
    {
      query: SUBSCRIPTION,
      variables: { orgId: options.orgId, ...(options.tags ? { tags: options.tags } : {}) },
      startAtHead: true,
    },
    {
      next: (result) => {
        const at = Date.now();
        if (result.errors) subscriber.errors.push(JSON.stringify(result.errors).slice(0, 300));
        const postId = result.data?.postPublished.id;
        if (!postId) return;
        const cursor = (result.extensions as { cursor?: string } | undefined)?.cursor;
        const place = cursor ? readCursor(cursor) : undefined;
        subscriber.frames.push({ postId, epoch: place?.epoch ?? '', position: place?.position ?? -1, at });
        options.onFrame?.(postId, at);
        if (reconcileOnNextFrame) {
          reconcileOnNextFrame = false;
          void reconcile();
        }
      },
      error: (error) =>
        subscriber.errors.push(String((error as Error)?.message ?? JSON.stringify(error)).slice(0, 300)),
      complete: () => subscriber.errors.push('completed'),
    },
  );
  return subscriber;
}

/** One publish: the post's id once created, and whether publishPost answered without errors. */
export interface PublishRecord {
  n: number;
  orgId: string;
  postId?: string;
  tags: string[];
  /** When publishPost was sent (ms). */
  sentAt: number;
  ok: boolean;
  error?: string;
  burst: boolean;
}

/** Creates a post with `tags` and publishes it through `baseUrl`. */
export async function publishOne(baseUrl: string, token: string, record: PublishRecord): Promise<PublishRecord> {
  try {
    const created = await postGraphql(baseUrl, token, CREATE_POST, {
      input: { orgId: record.orgId, title: `soak ${record.n}`, tags: record.tags },
    });
    if (!created.data?.createPost) {
      record.error = `createPost ${created.status}: ${JSON.stringify(created.errors).slice(0, 200)}`;
      return record;
    }
    record.postId = created.data.createPost.id as string;
    record.sentAt = Date.now();
    const published = await postGraphql(baseUrl, token, PUBLISH_POST, { id: record.postId });
    record.ok = published.status === 200 && !published.errors && published.data?.publishPost?.status === 'PUBLISHED';
    if (!record.ok) record.error = `publishPost ${published.status}: ${JSON.stringify(published.errors).slice(0, 200)}`;
  } catch (error) {
    record.error = (error as Error).message;
  }
  return record;
}

/** Tags of the n-th post: none, one or two of {@link TAGS}, cycling so every filter gets posts. */
export function tagsFor(n: number): string[] {
  switch (n % 5) {
    case 0:
      return [];
    case 1:
      return ['red'];
    case 2:
      return ['green'];
    case 3:
      return ['blue', 'red'];
    default:
      return ['green', 'blue'];
  }
}
