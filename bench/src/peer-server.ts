/**
 * The peers Herald is compared with, each set up the way its own documentation shows, serving
 * the bench's one subscription `postPublished(orgId)` with the selection `{ id title tags author { name } }`
 * over graphql-transport-ws on `/graphql`, with an in-memory pub/sub and the same post payload:
 *
 * - `apollo`: Apollo Server 5 + graphql-ws `useServer({ schema }, wsServer)` on the same `node:http`
 *   server, `makeExecutableSchema`, graphql-subscriptions' `PubSub` (the Apollo docs' subscriptions recipe;
 *   `POST /graphql` goes through `executeHTTPGraphQLRequest`, the drain plugin disposes graphql-ws).
 * - `mercurius`, `mercurius-nojit`: Fastify 5 + Mercurius 16 with `subscription: true` (its built-in
 *   mqemitter pub/sub, graphql-transport-ws), with `jit: 1` (graphql-jit after the first call) and without.
 * - `yoga`: stock graphql-yoga 5 + graphql-ws `useServer` through `yoga.getEnveloped` (the Yoga docs'
 *   graphql-ws recipe), Yoga's `createPubSub`.
 *
 * Like raw-server.ts: `POST /publish` (a BenchEvent as JSON; 204 once handed to the pub/sub), `GET /stats`
 * → `{"subscribed": n}` (subscriptions whose source stream is open). Listens on 127.0.0.1:$PORT and prints
 * `listening <port>`. Which peer: `$PEER`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApolloServer, HeaderMap } from '@apollo/server';
import { ApolloServerPluginDrainHttpServer } from '@apollo/server/plugin/drainHttpServer';
import { makeExecutableSchema } from '@graphql-tools/schema';
import Fastify from 'fastify';
import type { ExecutionArgs, execute, subscribe } from 'graphql';
import { PubSub } from 'graphql-subscriptions';
import { useServer } from 'graphql-ws/use/ws';
import { createPubSub, createSchema, createYoga } from 'graphql-yoga';
import mercurius from 'mercurius';
import { WebSocketServer } from 'ws';
import { type BenchEvent, PEER_ORG_ID, PEERS, type Peer } from './protocol.js';

const MAX_PAYLOAD_BYTES = 1024 * 1024;

const typeDefs = /* GraphQL */ `
  type Author {
    name: String!
  }
  type Post {
    id: ID!
    title: String!
    tags: [String!]!
    author: Author!
  }
  type Query {
    ok: Boolean!
  }
  type Subscription {
    postPublished(orgId: ID!): Post!
  }
`;

interface PostPayload {
  id: string;
  title: string;
  tags: string[];
  author: { name: string };
}

const topicOf = (orgId: string) => `post-published:${orgId}`;
const postOf = (event: BenchEvent): PostPayload => ({
  id: event.postId,
  title: event.title,
  tags: event.tags,
  author: { name: event.authorName },
});

let subscribed = 0;

/** Counts the subscription while its source stream is open (ended by `return()` on complete/close). */
function counted<T>(iterable: AsyncIterable<T>): AsyncIterableIterator<T> {
  const iterator = iterable[Symbol.asyncIterator]();
  subscribed++;
  let open = true;
  const end = () => {
    if (open) {
      open = false;
      subscribed--;
    }
  };
  return {
    [Symbol.asyncIterator]() {
      return this;
    },
    async next() {
      const result = await iterator.next();
      if (result.done) end();
      return result;
    },
    async return(value?: unknown) {
      end();
      return iterator.return ? iterator.return(value) : { done: true, value: value as T };
    },
  };
}

/** What a peer gives the shared HTTP routes. */
interface Started {
  publish(event: BenchEvent): Promise<void> | void;
  port: number;
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** `/publish` and `/stats` on a `node:http` server; anything else goes to `rest`. */
function benchRoutes(
  publish: (event: BenchEvent) => Promise<void> | void,
  rest: (req: IncomingMessage, res: ServerResponse) => void,
) {
  return (req: IncomingMessage, res: ServerResponse) => {
    if (req.method === 'GET' && req.url === '/stats') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ subscribed }));
      return;
    }
    if (req.method === 'POST' && req.url === '/publish') {
      readBody(req)
        .then(async (body) => {
          await publish(JSON.parse(body) as BenchEvent);
          res.writeHead(204).end();
        })
        .catch((error: Error) => res.writeHead(500).end(error.message));
      return;
    }
    rest(req, res);
  };
}

function listen(server: Server): Promise<number> {
  return new Promise((resolve) =>
    server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
  );
}

async function startApollo(): Promise<Started> {
  const pubsub = new PubSub<Record<string, PostPayload>>();
  const schema = makeExecutableSchema({
    typeDefs,
    resolvers: {
      Query: { ok: () => true },
      Subscription: {
        postPublished: {
          subscribe: (_: unknown, args: { orgId: string }) =>
            counted(pubsub.asyncIterableIterator(topicOf(args.orgId))),
          resolve: (post: PostPayload) => post,
        },
      },
    },
  });
  const publish = (event: BenchEvent) => pubsub.publish(topicOf(PEER_ORG_ID), postOf(event));
  let apollo: ApolloServer | undefined;
  const httpServer = createServer(
    benchRoutes(publish, (req, res) => {
      if (req.url?.startsWith('/graphql') && apollo) void apolloHttp(apollo, req, res);
      else res.writeHead(404).end();
    }),
  );
  const wsServer = new WebSocketServer({ server: httpServer, path: '/graphql', maxPayload: MAX_PAYLOAD_BYTES });
  const serverCleanup = useServer({ schema }, wsServer);
  apollo = new ApolloServer({
    schema,
    plugins: [
      ApolloServerPluginDrainHttpServer({ httpServer }),
      {
        async serverWillStart() {
          return {
            async drainServer() {
              await serverCleanup.dispose();
            },
          };
        },
      },
    ],
  });
  await apollo.start();
  const port = await listen(httpServer);
  return { port, publish, close: () => apollo.stop() };
}

/** The part of an Apollo integration that turns a `node:http` request into `executeHTTPGraphQLRequest`. */
async function apolloHttp(apollo: ApolloServer, req: IncomingMessage, res: ServerResponse) {
  const headers = new HeaderMap();
  for (const [key, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers.set(key, Array.isArray(value) ? value.join(', ') : value);
  }
  const raw = await readBody(req);
  const response = await apollo.executeHTTPGraphQLRequest({
    httpGraphQLRequest: {
      method: req.method ?? 'GET',
      headers,
      search: new URL(req.url ?? '/', 'http://x').search,
      body: raw ? JSON.parse(raw) : undefined,
    },
    context: async () => ({}),
  });
  for (const [key, value] of response.headers) res.setHeader(key, value);
  res.statusCode = response.status ?? 200;
  if (response.body.kind === 'complete') res.end(response.body.string);
  else {
    for await (const chunk of response.body.asyncIterator) res.write(chunk);
    res.end();
  }
}

async function startMercurius(jit: boolean): Promise<Started> {
  const app = Fastify({ logger: false });
  await app.register(mercurius, {
    schema: typeDefs,
    resolvers: {
      Query: { ok: () => true },
      Subscription: {
        postPublished: {
          subscribe: async (_: unknown, args: { orgId: string }, { pubsub }: { pubsub: mercurius.PubSub }) =>
            counted(await pubsub.subscribe(topicOf(args.orgId))),
        },
      },
    },
    subscription: { fullWsTransport: false },
    ...(jit ? { jit: 1 } : {}),
    path: '/graphql',
  });
  const publish = (event: BenchEvent) =>
    app.graphql.pubsub.publish({ topic: topicOf(PEER_ORG_ID), payload: { postPublished: postOf(event) } });
  app.post('/publish', async (request, reply) => {
    await publish(request.body as BenchEvent);
    return reply.code(204).send();
  });
  app.get('/stats', async () => ({ subscribed }));
  await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) });
  return { port: (app.server.address() as AddressInfo).port, publish, close: () => app.close() };
}

/** Yoga's enveloped execute/subscribe, carried to graphql-ws in the root value (the Yoga recipe). */
interface EnvelopedRoot {
  execute: typeof execute;
  subscribe: typeof subscribe;
}

async function startYoga(): Promise<Started> {
  const pubsub = createPubSub<{ 'post-published': [orgId: string, post: PostPayload] }>();
  const yoga = createYoga({
    schema: createSchema({
      typeDefs,
      resolvers: {
        Query: { ok: () => true },
        Subscription: {
          postPublished: {
            subscribe: (_: unknown, args: { orgId: string }) => counted(pubsub.subscribe('post-published', args.orgId)),
            resolve: (post: PostPayload) => post,
          },
        },
      },
    }),
    logging: false,
  });
  const publish = (event: BenchEvent) => pubsub.publish('post-published', PEER_ORG_ID, postOf(event));
  const httpServer = createServer(benchRoutes(publish, yoga));
  const wsServer = new WebSocketServer({
    server: httpServer,
    path: yoga.graphqlEndpoint,
    maxPayload: MAX_PAYLOAD_BYTES,
  });
  const cleanup = useServer(
    {
      execute: (args: ExecutionArgs) => (args.rootValue as EnvelopedRoot).execute(args),
      subscribe: (args: ExecutionArgs) => (args.rootValue as EnvelopedRoot).subscribe(args),
      onSubscribe: async (ctx, _id, params) => {
        const { schema, execute, subscribe, contextFactory, parse, validate } = yoga.getEnveloped({
          ...ctx,
          req: ctx.extra.request,
          socket: ctx.extra.socket,
          params,
        });
        const args = {
          schema,
          operationName: params.operationName,
          document: parse(params.query),
          variableValues: params.variables,
          contextValue: await contextFactory(),
          rootValue: { execute, subscribe } satisfies EnvelopedRoot,
        };
        const errors = validate(args.schema, args.document);
        if (errors.length) return errors;
        return args;
      },
    },
    wsServer,
  );
  const port = await listen(httpServer);
  return {
    port,
    publish,
    close: async () => {
      await cleanup.dispose();
      await new Promise((resolve) => httpServer.close(resolve));
    },
  };
}

/** Starts one peer (`mercurius` with its JIT, `mercurius-nojit` without). */
export function startPeer(peer: Peer): Promise<Started> {
  switch (peer) {
    case 'apollo':
      return startApollo();
    case 'mercurius':
      return startMercurius(true);
    case 'mercurius-nojit':
      return startMercurius(false);
    case 'yoga':
      return startYoga();
  }
}

const peer = process.env.PEER as Peer | undefined;
if (peer) {
  if (!PEERS.includes(peer)) throw new Error(`PEER must be one of ${PEERS.join(', ')}; got ${peer}`);
  const started = await startPeer(peer);
  process.stdout.write(`listening ${started.port}\n`);
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      setTimeout(() => process.exit(0), 2_000).unref();
      void started.close().finally(() => process.exit(0));
    });
  }
}
