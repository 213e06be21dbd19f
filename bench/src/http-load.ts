/**
 * The HTTP section's load client, in its own process: `connections` keep-alive connections (undici
 * Pool, no pipelining), each looping one request at a time for `durationMs` (closed loop: 64 requests
 * always in flight at 64 connections). Every response is checked: HTTP 200 and no `errors`; every
 * `CHECK_EVERY`th is parsed and compared field by field with what the operation must answer, so a fast
 * wrong answer cannot score. `publishPost` takes a fresh draft id per request from `ids` and stops when
 * they run out (reported, so the trial is flagged). Controlled over IPC: `{type:'run', …}` →
 * `{type:'result', …}`.
 */
import { Pool } from 'undici';
import { Histogram, type HistogramData, wallNow } from './common.js';
import { HTTP_OPERATIONS, type HttpOperation } from './http-sql.js';

/** One response in this many is parsed and checked field by field (the rest: status and `errors`). */
const CHECK_EVERY = 8;

export interface HttpLoadCommand {
  type: 'run';
  origin: string;
  connections: number;
  durationMs: number;
  operation: HttpOperation;
  token: string;
  orgId: string;
  userId: string;
  /** Drafts to publish, one per request (publishPost only). */
  ids?: string[];
}

export interface HttpLoadResult {
  type: 'result';
  requests: number;
  /** Transport errors, non-200 answers, answers with `errors`, and answers with the wrong content. */
  failures: number;
  firstFailure: string | undefined;
  /** publishPost ran out of drafts before the time was up. */
  exhausted: boolean;
  durationMs: number;
  latency: HistogramData;
}

const TITLE = 'Benchmark post: created over HTTP by the load client';
const TAGS = ['bench', 'http'];

function bodyFor(command: HttpLoadCommand, id: string | undefined): string {
  const operationName = command.operation.charAt(0).toUpperCase() + command.operation.slice(1);
  const variables =
    command.operation === 'posts'
      ? { orgId: command.orgId }
      : command.operation === 'createPost'
        ? { input: { orgId: command.orgId, title: TITLE, tags: TAGS } }
        : command.operation === 'publishPost'
          ? { id }
          : {};
  return JSON.stringify({ query: HTTP_OPERATIONS[command.operation], operationName, variables });
}

/** @returns why the answer is wrong, or undefined */
function check(command: HttpLoadCommand, data: any, id: string | undefined): string | undefined {
  switch (command.operation) {
    case 'me':
      return data?.me?.id === command.userId ? undefined : 'me.id';
    case 'posts': {
      const edges = data?.posts?.edges;
      if (!Array.isArray(edges) || edges.length !== 10) return 'posts: not 10 edges';
      const ok = edges.every(
        (edge: any) =>
          typeof edge.node?.id === 'string' &&
          typeof edge.node.title === 'string' &&
          Array.isArray(edge.node.tags) &&
          typeof edge.node.author?.name === 'string',
      );
      return ok ? undefined : 'posts: a node lacks a field';
    }
    case 'createPost':
      return data?.createPost?.title === TITLE && data.createPost.tags?.join() === TAGS.join()
        ? undefined
        : 'createPost';
    case 'publishPost':
      return data?.publishPost?.id === id && data.publishPost.status === 'PUBLISHED' ? undefined : 'publishPost';
  }
}

async function run(command: HttpLoadCommand): Promise<HttpLoadResult> {
  const pool = new Pool(command.origin, { connections: command.connections, pipelining: 1 });
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${command.token}` };
  const fixedBody = command.operation === 'publishPost' ? undefined : bodyFor(command, undefined);
  const latency = new Histogram();
  let requests = 0;
  let failures = 0;
  let firstFailure: string | undefined;
  let exhausted = false;
  let nextId = 0;
  const start = wallNow();
  let end = start;
  const failed = (why: string) => {
    failures++;
    firstFailure ??= why;
  };
  const lane = async () => {
    while (wallNow() - start < command.durationMs) {
      let id: string | undefined;
      if (command.operation === 'publishPost') {
        id = command.ids?.[nextId++];
        if (id === undefined) {
          exhausted = true;
          return;
        }
      }
      const sent = wallNow();
      try {
        const response = await pool.request({
          path: '/graphql',
          method: 'POST',
          headers,
          body: fixedBody ?? bodyFor(command, id),
        });
        const text = await response.body.text();
        end = wallNow();
        latency.record((end - sent) * 1000);
        if (response.statusCode !== 200) failed(`HTTP ${response.statusCode}: ${text.slice(0, 300)}`);
        else if (text.includes('"errors"')) failed(text.slice(0, 300));
        else if (requests % CHECK_EVERY === 0 && check(command, JSON.parse(text).data, id) !== undefined) {
          failed(`wrong answer (${check(command, JSON.parse(text).data, id)}): ${text.slice(0, 300)}`);
        } else requests++;
      } catch (error) {
        failed(`transport: ${(error as Error).message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: command.connections }, lane));
  await pool.close();
  return {
    type: 'result',
    requests,
    failures,
    firstFailure,
    exhausted,
    durationMs: end - start,
    latency: latency.data(),
  };
}

process.on('message', (command: HttpLoadCommand) => {
  if (command.type === 'run') void run(command).then((result) => process.send?.(result));
});
process.on('disconnect', () => process.exit(0));
