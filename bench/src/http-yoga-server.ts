/**
 * The HTTP section's "stock Yoga" peer: graphql-yoga as its docs set it up (`createSchema` with SDL and
 * hand-written resolvers, the token verified with jose in the context factory as jose's README does),
 * over the same SQL as the raw loop (`http-sql.ts`: one join for posts, no DataLoader needed), the same
 * transactions, and Yoga's own `createPubSub` for publishPost. Production defaults otherwise.
 *
 * Environment: DATABASE_URL, JWT_SECRET, PORT. Listens on 127.0.0.1 and prints `listening <port>`.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { GraphQLError } from 'graphql';
import { createPubSub, createSchema, createYoga } from 'graphql-yoga';
import { jwtVerify } from 'jose';
import pg from 'pg';
import { createPostTx, publishPostTx, selectPostsPage, type TokenClaims } from './http-sql.js';

/** Same as Herald's default pool size. */
const POOL_MAX = 10;

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: POOL_MAX });
const secret = new TextEncoder().encode(process.env.JWT_SECRET ?? '');
const pubsub = createPubSub<{ 'post-published': [orgId: string, post: unknown] }>();

type Context = Record<string, unknown> & {
  viewer: TokenClaims | null;
};

const fail = (message: string, code: string) => new GraphQLError(message, { extensions: { code } });

const schema = createSchema<Context>({
  typeDefs: /* GraphQL */ `
    type Query { me: User  posts(orgId: ID!, first: Int): PostConnection! }
    type Mutation { createPost(input: CreatePostInput!): Post!  publishPost(id: ID!): Post! }
    input CreatePostInput { orgId: ID!  title: String!  tags: [String!] }
    type User { id: ID!  name: String! }
    type Author { name: String! }
    enum PostStatus { DRAFT PUBLISHED }
    type Post { id: ID!  title: String!  tags: [String!]!  status: PostStatus!  author: Author! }
    type PostEdge { node: Post! }
    type PostConnection { edges: [PostEdge!]! }
  `,
  resolvers: {
    Query: {
      me: (_root, _args, { viewer }) => (viewer ? { id: viewer.sub, name: viewer.name } : null),
      posts: async (_root, args: { orgId: string; first?: number }, { viewer }) => {
        if (!viewer) throw fail('Unauthenticated', 'UNAUTHENTICATED');
        if (!viewer.orgs.includes(args.orgId)) throw fail('Forbidden', 'FORBIDDEN');
        const rows = await selectPostsPage(pool, args.orgId, args.first ?? 20);
        return {
          edges: rows.map((row) => ({
            node: { id: row.id, title: row.title, tags: row.tags, author: { name: row.name } },
          })),
        };
      },
    },
    Mutation: {
      createPost: async (
        _root,
        { input }: { input: { orgId: string; title: string; tags?: string[] } },
        { viewer },
      ) => {
        if (!viewer) throw fail('Unauthenticated', 'UNAUTHENTICATED');
        if (!viewer.orgs.includes(input.orgId)) throw fail('Forbidden', 'FORBIDDEN');
        return createPostTx(pool, viewer, input.orgId, input.title.trim(), input.tags ?? []);
      },
      publishPost: async (_root, { id }: { id: string }, { viewer }) => {
        if (!viewer) throw fail('Unauthenticated', 'UNAUTHENTICATED');
        const result = await publishPostTx(pool, viewer, id);
        if (!result) throw fail('Post not found', 'NOT_FOUND');
        if (result.published) pubsub.publish('post-published', result.post.org_id, result.post);
        return result.post;
      },
    },
  },
});

const yoga = createYoga<Record<string, unknown>, Context>({
  schema,
  logging: 'warn',
  context: async ({ request }) => {
    const authorization = request.headers.get('authorization');
    if (!authorization) return { viewer: null };
    try {
      const { payload } = await jwtVerify(authorization.slice(7), secret, { algorithms: ['HS256'] });
      return {
        viewer: {
          sub: String(payload.sub),
          name: String(payload.name ?? payload.sub),
          orgs: (payload.orgs as string[]) ?? [],
          exp: payload.exp ?? 0,
        },
      };
    } catch {
      throw fail('Invalid token', 'UNAUTHENTICATED');
    }
  },
});

const server = createServer(yoga);
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(`listening ${(server.address() as AddressInfo).port}\n`);
});
process.once('SIGTERM', () => {
  server.close();
  server.closeAllConnections();
  void pool.end().finally(() => process.exit(0));
});
