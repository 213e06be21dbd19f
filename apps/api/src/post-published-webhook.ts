import { POST_PUBLISHED_EVENT } from '@herald/contracts';
import { type Database, insertOutboxEvent, newWebhookEventId, type Post } from '@herald/db';
import type { WebhookEvent } from '@herald/webhooks';
import type { Transaction } from 'kysely';

/** `data` of a `post.published` webhook: the post as the API shows it (SPEC §5, §7). */
export interface PostPublishedWebhookData {
  id: string;
  orgId: string;
  title: string;
  tags: string[];
  status: 'PUBLISHED';
  publishedAt: string;
  author: { id: string; name: string };
}

/**
 * Writes the `post.published` webhook event to the outbox inside the transaction that published the
 * post, so the event exists exactly when the publication committed. The dispatcher delivers it.
 */
export async function recordPostPublishedWebhook(trx: Transaction<Database>, post: Post): Promise<void> {
  const author = await trx
    .selectFrom('users')
    .select(['id', 'name'])
    .where('id', '=', post.author_id)
    .executeTakeFirstOrThrow();
  const created = new Date();
  const event: WebhookEvent<PostPublishedWebhookData> = {
    id: newWebhookEventId(),
    type: POST_PUBLISHED_EVENT,
    created: created.toISOString(),
    data: {
      id: post.id,
      orgId: post.org_id,
      title: post.title,
      tags: post.tags,
      status: 'PUBLISHED',
      publishedAt: (post.published_at ?? created).toISOString(),
      author: { id: author.id, name: author.name },
    },
  };
  await insertOutboxEvent(trx, {
    id: event.id,
    orgId: post.org_id,
    type: event.type,
    body: JSON.stringify(event),
    createdAt: created,
  });
}
