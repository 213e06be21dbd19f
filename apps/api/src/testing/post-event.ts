import { newEventId, type PostPublishedEventV1 } from '@herald/contracts';

/** A `post.published` event of `orgId` for history tests: post `post-<n>`, titled `post <n>`. */
export function testPostEvent(orgId: string, n: number | string): PostPublishedEventV1 {
  return {
    v: 1,
    eventId: newEventId(),
    orgId,
    post: {
      id: `post-${n}`,
      orgId,
      title: `post ${n}`,
      tags: [],
      status: 'PUBLISHED',
      publishedAt: new Date().toISOString(),
      author: { id: 'u', name: 'U' },
    },
    emittedAt: Date.now(),
  } as unknown as PostPublishedEventV1;
}
