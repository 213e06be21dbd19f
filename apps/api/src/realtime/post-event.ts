import { POST_PUBLISHED_EVENT_VERSION, type PostPublishedEventV1 } from '@herald/contracts';
import type { Post } from '@herald/db';

/**
 * The wire event for a published post (camelCase, JSON-safe). `emittedAt` is set when it enters the history.
 * `traceparent` (the publishing operation's, when tracing was on) is left out when absent.
 */
export function toPostPublishedEvent(post: Post, eventId: string, traceparent?: string | null): PostPublishedEventV1 {
  const event: PostPublishedEventV1 = {
    v: POST_PUBLISHED_EVENT_VERSION,
    eventId,
    orgId: post.org_id,
    post: {
      id: post.id,
      orgId: post.org_id,
      authorId: post.author_id,
      title: post.title,
      tags: post.tags,
      status: post.status,
      createdAt: toIso(post.created_at),
      publishedAt: post.published_at == null ? null : toIso(post.published_at),
      seq: String(post.seq),
    },
    emittedAt: Date.now(),
  };
  if (traceparent) event.traceparent = traceparent;
  return event;
}

/** The post row the GraphQL `Post` type resolves from, rebuilt from a wire event. */
export function toPostRow(event: PostPublishedEventV1): Post {
  const { post } = event;
  return {
    id: post.id,
    org_id: post.orgId,
    author_id: post.authorId,
    title: post.title,
    tags: post.tags,
    status: post.status,
    created_at: new Date(post.createdAt),
    published_at: post.publishedAt == null ? null : new Date(post.publishedAt),
    seq: post.seq,
  };
}

function toIso(value: Date | string): string {
  return value instanceof Date ? value.toISOString() : new Date(value).toISOString();
}
