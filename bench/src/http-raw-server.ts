/**
 * The HTTP section's physical limit: `node:http` + `pg`, no GraphQL. It accepts the very request bodies
 * Herald gets (`POST /graphql`, JSON `{query, operationName, variables}`), picks the operation by
 * `operationName`, verifies the same HS256 token with node:crypto, runs the same SQL
 * (`http-sql.ts`: one join for posts, the same transactions for the mutations) and answers the same
 * JSON, written once. `publishPost` also publishes the post in process (an EventEmitter), as Herald's
 * in-memory pub/sub does.
 *
 * Environment: DATABASE_URL, JWT_SECRET, PORT. Listens on 127.0.0.1 and prints `listening <port>`.
 */
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import {
  createPostTx,
  OPERATION_NAMES,
  publishPostTx,
  selectPostsPage,
  type TokenClaims,
  verifyHs256,
} from './http-sql.js';

/** Same as Herald's default pool size (packages/db create-database.ts). */
const POOL_MAX = 10;

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: POOL_MAX });
const secret = Buffer.from(process.env.JWT_SECRET ?? '', 'utf8');
/** `wrong-me` answers `me` with another id: the smoke test proves the load client's checks catch it. */
const FAULT = process.env.RAW_FAULT ?? '';
const events = new EventEmitter();
events.setMaxListeners(0);

function send(response: ServerResponse, status: number, body: unknown): void {
  const json = JSON.stringify(body);
  response.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(json),
  });
  response.end(json);
}

const error = (message: string, code: string) => ({ errors: [{ message, extensions: { code } }] });

async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  let body: { operationName?: string; variables?: Record<string, any> };
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    return send(response, 400, error('bad JSON', 'BAD_REQUEST'));
  }
  const authorization = request.headers.authorization;
  let viewer: TokenClaims | undefined;
  if (authorization !== undefined) {
    viewer = authorization.startsWith('Bearer ') ? verifyHs256(authorization.slice(7), secret) : undefined;
    if (!viewer) return send(response, 401, error('Invalid token', 'UNAUTHENTICATED'));
  }
  const variables = body.variables ?? {};
  switch (OPERATION_NAMES[body.operationName ?? '']) {
    case 'me':
      if (FAULT === 'wrong-me') return send(response, 200, { data: { me: { id: 'someone-else' } } });
      return send(response, 200, { data: { me: viewer ? { id: viewer.sub } : null } });
    case 'posts': {
      const orgId = String(variables.orgId);
      if (!viewer) return send(response, 200, error('Unauthenticated', 'UNAUTHENTICATED'));
      if (!viewer.orgs.includes(orgId)) return send(response, 200, error('Forbidden', 'FORBIDDEN'));
      const rows = await selectPostsPage(pool, orgId, 10);
      const edges = rows.map((row) => ({
        node: { id: row.id, title: row.title, tags: row.tags, author: { name: row.name } },
      }));
      return send(response, 200, { data: { posts: { edges } } });
    }
    case 'createPost': {
      const input = variables.input ?? {};
      if (!viewer) return send(response, 200, error('Unauthenticated', 'UNAUTHENTICATED'));
      if (!viewer.orgs.includes(String(input.orgId))) return send(response, 200, error('Forbidden', 'FORBIDDEN'));
      const post = await createPostTx(pool, viewer, String(input.orgId), String(input.title).trim(), input.tags ?? []);
      return send(response, 200, { data: { createPost: { id: post.id, title: post.title, tags: post.tags } } });
    }
    case 'publishPost': {
      if (!viewer) return send(response, 200, error('Unauthenticated', 'UNAUTHENTICATED'));
      const result = await publishPostTx(pool, viewer, String(variables.id));
      if (!result) return send(response, 200, error('Post not found', 'NOT_FOUND'));
      if (result.published) events.emit(`post-published:${result.post.org_id}`, result.post);
      return send(response, 200, { data: { publishPost: { id: result.post.id, status: result.post.status } } });
    }
    default:
      return send(response, 400, error('unknown operation', 'BAD_REQUEST'));
  }
}

const server = createServer((request, response) => {
  handle(request, response).catch((failure: unknown) => {
    process.stderr.write(`raw http: ${(failure as Error).stack}\n`);
    if (!response.headersSent) send(response, 500, error('Unexpected error.', 'INTERNAL_SERVER_ERROR'));
  });
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(`listening ${(server.address() as AddressInfo).port}\n`);
});
process.once('SIGTERM', () => {
  server.close();
  server.closeAllConnections();
  void pool.end().finally(() => process.exit(0));
});
