import { isMemberOf, type Viewer } from '@herald/auth';
import { findPostById, insertPostWithAuthor, listPostsByOrg, type Post, type PostWithAuthor } from '@herald/db';
import { activeTraceparent } from '@herald/telemetry';
import type { GraphQLResolveInfo } from 'graphql';
import type { Context } from '../context.js';
import { BadUserInputError, HistoryUnavailableError, NotFoundError } from '../errors.js';
import { loadersFor } from '../loaders.js';
import { READS_IN_ONE_STEP } from '../plugins/use-compiled-execution.js';
import { publishPostWithWebhook } from '../post-published-webhook.js';
import { encodeCursor } from '../realtime/cursor.js';
import { filterStream } from '../realtime/filter-stream.js';
import { toPostRow } from '../realtime/post-event.js';
import { openPostPublishedStream, type StreamedEntry } from '../realtime/post-published-stream.js';
import { SHARED_ACROSS_VIEWERS } from '../realtime/shared-across-viewers.js';
import { AuthorRef } from './author.js';
import { builder } from './builder.js';
import { CreatePostInput } from './create-post-input.js';
import { postPageColumns } from './post-page-columns.js';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, resolveSeqConnection } from './seq-connection.js';

const MAX_TITLE_LENGTH = 300;
const MAX_TAGS = 20;
const MAX_TAG_LENGTH = 50;

export const PostStatusEnum = builder.enumType('PostStatus', {
  values: { DRAFT: { value: 'DRAFT' }, PUBLISHED: { value: 'PUBLISHED' } } as const,
});

/**
 * A post. Resolvers receive the database row; for subscription events, the same row after a JSON round
 * trip (dates as ISO strings), which every field here accepts.
 */
export const PostRef = builder.objectRef<Post>('Post').implement({
  // Every field resolves the same for every viewer (tenancy is checked where a post is reached, not on
  // its fields), so subscriptions may share its execution. A viewer-dependent field needs this removed.
  extensions: { [SHARED_ACROSS_VIEWERS]: true },
  fields: (t) => ({
    id: t.exposeID('id'),
    orgId: t.exposeID('org_id'),
    title: t.exposeString('title'),
    tags: t.exposeStringList('tags'),
    status: t.field({ type: PostStatusEnum, resolve: (post) => post.status }),
    createdAt: t.field({ type: 'DateTime', resolve: (post) => post.created_at }),
    publishedAt: t.field({ type: 'DateTime', nullable: true, resolve: (post) => post.published_at }),
    author: t.field({
      type: AuthorRef,
      resolve: (post, _args, context, info) => {
        // A posts page read each author by a join (`author_name`): answered from the row, with no
        // loader and no promise (a `page` row has no `author_id`: it is read only when `author { id }`
        // is not asked, see post-page-columns.ts). Subscription events always load theirs fresh.
        const joined = (post as Partial<PostWithAuthor>).author_name;
        if (joined !== undefined && info.operation.operation !== 'subscription') {
          return { id: post.author_id, name: joined };
        }
        return loadAuthor(post, context, info);
      },
    }),
  }),
});

async function loadAuthor(post: Post, context: Context, info: GraphQLResolveInfo) {
  const author = await loadersFor(context, info).author.load(post.author_id);
  // posts.author_id references users.id, so a missing author is a broken invariant, not user error.
  if (!author) throw new Error(`author ${post.author_id} of post ${post.id} is missing`);
  return author;
}

const PostConnection = builder.connectionObject({ type: PostRef, name: 'PostConnection' }, { name: 'PostEdge' });

builder.queryFields((t) => ({
  post: t.withAuth({ viewer: true }).field({
    type: PostRef,
    nullable: true,
    description: "A post by id; null when it does not exist or belongs to an organisation you're not in.",
    args: { id: t.arg.id({ required: true }) },
    resolve: async (_root, { id }, context) => {
      const post = await findPostById(context.db, String(id));
      return post && isMemberOf(context.viewer, post.org_id) ? post : null;
    },
  }),
  postPublishedCursor: t.field({
    type: 'String',
    nullable: true,
    description:
      "The cursor of the organisation's latest event (0 events: the start of its history). Subscribe to `postPublished` with it as `after` and you receive every event published from now on, even if the connection drops before the first one. Null when resuming is turned off.",
    authScopes: (_root, args) => ({ viewer: true, orgMember: String(args.orgId) }),
    args: { orgId: t.arg.id({ required: true }) },
    resolve: async (_root, { orgId }, context) => {
      const { history } = context.pubsub;
      if (!history.enabled) return null;
      let head: { epoch: string; position: number };
      try {
        head = await history.head(String(orgId));
      } catch {
        throw new HistoryUnavailableError();
      }
      return encodeCursor({ orgId: String(orgId), ...head });
    },
  }),
  posts: t.field({
    type: PostConnection,
    description: "An organisation's posts, newest first.",
    // One statement, sent in the resolver's first step; authors and cursors come from its rows.
    extensions: { [READS_IN_ONE_STEP]: true },
    authScopes: (_root, args) => ({ viewer: true, orgMember: String(args.orgId) }),
    args: {
      orgId: t.arg.id({ required: true }),
      first: t.arg.int({ description: `Page size, at most ${MAX_PAGE_SIZE}. @default ${DEFAULT_PAGE_SIZE}` }),
      after: t.arg.string(),
    },
    resolve: (_root, args, context, info) => {
      // Only the columns the asked fields use (postPageColumns: a `page` row has no timestamps nor
      // status, and is asked for only when no such field is). The page's query reads the authors too
      // (a join): `author` is then answered from each row.
      const columns = postPageColumns(info);
      return resolveSeqConnection<Post>(
        'post',
        args,
        (page) => listPostsByOrg(context.db, { orgId: String(args.orgId), ...page, columns }) as Promise<Post[]>,
      );
    },
  }),
}));

builder.mutationFields((t) => ({
  createPost: t.field({
    type: PostRef,
    description: 'Creates a draft post in an organisation you belong to.',
    authScopes: (_root, args) => ({ viewer: true, orgMember: String(args.input.orgId) }),
    args: { input: t.arg({ type: CreatePostInput, required: true }) },
    resolve: async (_root, { input }, context) => {
      const viewer = context.viewer;
      if (!viewer) throw new Error('unreachable: authScopes require a viewer');
      const title = input.title.trim();
      if (title.length === 0 || title.length > MAX_TITLE_LENGTH) {
        throw new BadUserInputError(`title must be 1 to ${MAX_TITLE_LENGTH} characters`, 'title');
      }
      const tags = (input.tags ?? []).map((tag) => tag.trim());
      if (tags.length > MAX_TAGS || tags.some((tag) => tag.length === 0 || tag.length > MAX_TAG_LENGTH)) {
        throw new BadUserInputError(`at most ${MAX_TAGS} tags of 1 to ${MAX_TAG_LENGTH} characters`, 'tags');
      }
      // The author row and the draft in one statement (one round trip); `author` is then known.
      const post = await insertPostWithAuthor(context.db, {
        orgId: String(input.orgId),
        authorId: viewer.id,
        authorName: viewer.name,
        title,
        tags,
      });
      context.loaders.author.prime(viewer.id, { id: viewer.id, name: viewer.name });
      return post;
    },
  }),
  publishPost: t.withAuth({ viewer: true }).field({
    type: PostRef,
    description: 'Publishes a draft. Publishing an already published post returns it unchanged.',
    args: { id: t.arg.id({ required: true }) },
    resolve: async (_root, { id }, context) => {
      // The organisation's publish quota, before anything is written: a refused publish commits nothing.
      const orgId = await publishingOrganization(context, String(id));
      if (orgId !== undefined) {
        const refused = await context.quotas.checkPublish(orgId);
        if (refused) throw refused;
      }
      // The durable event caused by the change (webhook outbox row) is written by the same statement.
      // The webhook dispatchers are woken after the commit (in `published()`: through Redis, or in
      // process), not with a NOTIFY that would serialise the commits.
      // The operation's trace context travels with the event: webhook attempts and fan-out join it.
      const traceparent = activeTraceparent();
      const result = await publishPostWithWebhook(context.db, String(id), context.viewer.orgs, {
        notify: !context.pubsub.wakesWebhookDispatchers,
        historyInProcess: context.pubsub.historyInProcess,
        traceparent,
      });
      if (!result) throw new NotFoundError('Post');
      // Realtime events go out only after the commit above, so no subscriber sees an uncommitted post:
      // the committed outbox event is appended to the history (and goes out live) before the answer, by
      // this pod or, when it was handed over, by the history relay (docs/subscriptions.md).
      if (result.published && result.eventId)
        await context.pubsub.published({
          post: result.post,
          eventId: result.eventId,
          handedToRelay: result.handedToRelay,
          fanOutDue: result.fanOutDue,
          historied: result.historied,
          traceparent,
        });
      return result.post;
    },
  }),
}));

/**
 * The organisation a `publishPost` would publish in: the viewer's only organisation (a post elsewhere
 * is NOT_FOUND anyway), else the post's, read first. Undefined when the post is not one the viewer may
 * publish (answered NOT_FOUND, counted against no organisation).
 */
async function publishingOrganization(context: Context & { viewer: Viewer }, postId: string) {
  const { orgs } = context.viewer;
  if (orgs.length === 1) return orgs[0];
  if (orgs.length === 0) return undefined;
  const post = await findPostById(context.db, postId);
  return post && orgs.includes(post.org_id) ? post.org_id : undefined;
}

builder.subscriptionFields((t) => ({
  postPublished: t.field({
    type: PostRef,
    description:
      "Posts of an organisation you belong to, as they are published. With `tags`, only posts sharing at least one of them. Each event carries a cursor in `extensions.cursor`; pass the last one as `after` to resume: first every later event still in the history, then live, none skipped or repeated. A cursor the server can't honour is refused with CURSOR_EXPIRED: reconcile with `posts` and subscribe again without `after`.",
    authScopes: (_root, args) => ({ viewer: true, orgMember: String(args.orgId) }),
    // Authorized per subscriber at subscribe time; after that, what an event resolves to depends only on
    // the arguments, so identical subscriptions may share one execution per event.
    extensions: { [SHARED_ACROSS_VIEWERS]: true },
    args: {
      orgId: t.arg.id({ required: true }),
      tags: t.arg.stringList({ description: 'Deliver only posts that carry at least one of these tags.' }),
      after: t.arg.string({
        description: 'Resume after this cursor (`extensions.cursor` of the last event received).',
      }),
    },
    subscribe: async (_root, { orgId, tags, after }, context) => {
      const org = String(orgId);
      const events = await openPostPublishedStream(context.pubsub, org, after);
      // Defence in depth: the channel is per organisation, but never hand over another tenant's post.
      const wanted = tags && tags.length > 0 ? new Set(tags) : undefined;
      return filterStream(
        events,
        ({ entry }: StreamedEntry) =>
          entry.event.orgId === org && (!wanted || entry.event.post.tags.some((tag) => wanted.has(tag))),
      );
    },
    resolve: ({ entry, replayed }: StreamedEntry, _args, context) => {
      context.event = {
        emittedAt: entry.event.emittedAt,
        epoch: entry.epoch,
        position: entry.position,
        cursor: context.pubsub.history.enabled
          ? encodeCursor({ orgId: entry.event.orgId, epoch: entry.epoch, position: entry.position })
          : undefined,
        replayed,
        traceparent: entry.event.traceparent,
      };
      return toPostRow(entry.event);
    },
  }),
}));
