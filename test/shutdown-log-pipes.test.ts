import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, constants, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createTestSchema, TEST_ENCRYPTION_KEYS, type TestSchema } from '@herald/testing';
import { freePort, waitFor } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startApiProcess } from './support/api-process.js';
import { postGraphql } from './support/graphql-http.js';

// One SIGTERM ends every Herald process, whatever its log pipe does: a reader that went away (a closed
// terminal, `pnpm start | tee` ended by Ctrl-C, a harness that exited) or one that stopped reading (a
// full pipe). Logging must neither throw into the shutdown nor block the event loop meanwhile.

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const JWT_SECRET = 'shutdown-log-pipes-secret-0123456789abcdef';
const START_TIMEOUT_MS = 90_000;
/** SHUTDOWN_GRACE_MS given to every process here. */
const GRACE_MS = 3_000;
/** The API's bound is drain (0 here) + grace + 5 s; the dispatcher's is its grace. Slack for a busy machine. */
const EXIT_BOUND_MS = GRACE_MS + 5_000 + 5_000;

interface Kind {
  name: string;
  main: string;
  env: () => Record<string, string>;
  /** A request the process answers; `logs`: it writes a log line for it. */
  request: (baseUrl: string) => Promise<Response>;
  logs: boolean;
}

let schema: TestSchema;
let scratch: string;

beforeAll(async () => {
  schema = await createTestSchema(inject('databaseUrl'));
  scratch = mkdtempSync(join(tmpdir(), 'herald-log-pipes-'));
});

afterAll(async () => {
  await schema?.drop();
  rmSync(scratch, { recursive: true, force: true });
});

/** Bounded: a process whose event loop is blocked fails the test instead of hanging it. */
const REQUEST_TIMEOUT_MS = 10_000;
const graphqlRequest = (baseUrl: string) =>
  fetch(`${baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query: '{ me { id } }' }),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });

let dataDirs = 0;
const KINDS: Kind[] = [
  {
    name: 'embedded API',
    main: 'apps/api/src/main.ts',
    env: () => ({ HERALD_DATA_DIR: join(scratch, `data-${dataDirs++}`) }),
    request: graphqlRequest,
    logs: true,
  },
  {
    name: 'cluster API',
    main: 'apps/api/src/main.ts',
    env: () => ({ DATABASE_URL: schema.url, REDIS_URL: inject('redisUrl'), JWT_SECRET }),
    request: graphqlRequest,
    logs: true,
  },
  {
    name: 'webhook dispatcher',
    main: 'apps/webhook-dispatcher/src/main.ts',
    env: () => ({ DATABASE_URL: schema.url, REDIS_URL: inject('redisUrl') }),
    request: (baseUrl) => fetch(`${baseUrl}/readiness`, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) }),
    // Probes are not logged: its shutdown's own lines are the ones that meet the closed pipe.
    logs: false,
  },
];

interface Started {
  child: ChildProcess;
  baseUrl: string;
  exited: Promise<number | null>;
}

async function start(kind: Kind, stdio: 'pipe' | number): Promise<Started> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', TSX_LOADER, kind.main], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '',
      HOST: '127.0.0.1',
      PORT: String(port),
      LOG_LEVEL: 'info',
      HERALD_REDIS_PREFIX: `herald-log-pipes-${port}:`,
      SHUTDOWN_DRAIN_DELAY_MS: '0',
      SHUTDOWN_GRACE_MS: String(GRACE_MS),
      HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
      ...kind.env(),
    },
    stdio: ['ignore', stdio, stdio],
  });
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  const baseUrl = `http://127.0.0.1:${port}`;
  let exitedEarly = false;
  void exited.then(() => {
    exitedEarly = true;
  });
  await waitFor(
    `${kind.name} answering /health`,
    async () => {
      if (exitedEarly) throw new Error(`${kind.name} exited before it served`);
      const answer = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(2_000) }).catch(() => undefined);
      return answer?.status === 200;
    },
    { timeoutMs: START_TIMEOUT_MS, intervalMs: 200 },
  );
  return { child, baseUrl, exited };
}

/** Sends SIGTERM; resolves with the exit code, or fails the test (and kills it) past the bound. */
async function terminate({ child, exited }: Started): Promise<number | null> {
  child.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<'still running'>((resolve) => {
    timer = setTimeout(() => resolve('still running'), EXIT_BOUND_MS);
  });
  const outcome = await Promise.race([exited, bound]);
  clearTimeout(timer);
  if (outcome === 'still running') child.kill('SIGKILL');
  return outcome === 'still running' ? -1 : outcome;
}

async function droppedLines(baseUrl: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const line = text.split('\n').find((row) => row.startsWith('herald_log_lines_dropped_total '));
  if (!line) throw new Error('herald_log_lines_dropped_total is not on /metrics');
  return Number(line.split(' ')[1]);
}

/**
 * A named pipe with a reader that never reads, filled to the brim: every write the process makes to it
 * would block. The returned descriptor is a blocking write end, as a shell pipe gives a process.
 */
function fullPipe(): { fd: number; close(): void } {
  const path = join(scratch, `fifo-${Date.now()}-${Math.random().toString(36).slice(2)}`);
  const made = spawnSync('mkfifo', [path]);
  if (made.status !== 0) throw new Error(`mkfifo failed: ${made.stderr}`);
  const reader = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  const filler = openSync(path, constants.O_WRONLY | constants.O_NONBLOCK);
  const chunk = Buffer.alloc(64 * 1024, 'x');
  for (;;) {
    try {
      writeSync(filler, chunk);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EAGAIN') break;
      throw error;
    }
  }
  closeSync(filler);
  const fd = openSync(path, constants.O_WRONLY);
  return {
    fd,
    close() {
      closeSync(fd);
      closeSync(reader);
    },
  };
}

describe.each(KINDS)('$name', (kind) => {
  it('exits with 0 on one SIGTERM after its log reader went away (counting the lines it could not write)', async () => {
    const started = await start(kind, 'pipe');
    started.child.stdout!.destroy();
    started.child.stderr!.destroy();
    await kind.request(started.baseUrl);
    if (kind.logs) {
      await waitFor('a dropped log line counted', async () => (await droppedLines(started.baseUrl)) > 0, {
        timeoutMs: 10_000,
      });
    }
    expect(await terminate(started)).toBe(0);
  }, 180_000);

  it('starts, serves and exits with 0 on one SIGTERM while its log pipe is full', async () => {
    const pipe = fullPipe();
    try {
      const started = await start(kind, pipe.fd);
      // Each answered although none of its log lines can be written (a blocked event loop answers none).
      for (let i = 0; i < 20; i++) {
        expect((await kind.request(started.baseUrl)).status).toBeLessThan(600);
      }
      expect((await fetch(`${started.baseUrl}/health`, { signal: AbortSignal.timeout(10_000) })).status).toBe(200);
      expect(await terminate(started)).toBe(0);
    } finally {
      pipe.close();
    }
  }, 180_000);
});

describe('a webhook receiver that never answers', () => {
  it('does not keep an embedded server from ending on one SIGTERM within its bound', async () => {
    let received = 0;
    const receiver = createServer(() => {
      received++; // never answers: the attempt stays in flight until WEBHOOK_TIMEOUT_MS
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    try {
      const api = await startApiProcess({
        HERALD_DATA_DIR: join(scratch, `data-${dataDirs++}`),
        SHUTDOWN_GRACE_MS: String(GRACE_MS),
        WEBHOOK_TIMEOUT_MS: '60000',
      });
      const token = (await api.waitForStderr(/Bearer ([\w-]+\.[\w-]+\.[\w-]+)/))[1]!;
      const call = async (query: string) => {
        const answer = await postGraphql(api.baseUrl, token, query);
        expect(answer.body.errors).toBeUndefined();
        return answer.body.data as any;
      };
      await call(
        `mutation { createWebhookEndpoint(input: { orgId: "demo", url: "${receiverUrl}", eventTypes: ["post.published"] }) { endpoint { id } } }`,
      );
      const post = await call('mutation { createPost(input: { orgId: "demo", title: "never answered" }) { id } }');
      await call(`mutation { publishPost(id: "${post.createPost.id}") { id } }`);
      await waitFor('the attempt in flight', () => received > 0, { timeoutMs: 30_000 });

      const started = Date.now();
      const timer = setTimeout(() => api.child.kill('SIGKILL'), EXIT_BOUND_MS);
      const code = await api.stop('SIGTERM');
      clearTimeout(timer);
      expect(api.child.signalCode).toBeNull();
      expect([0, 1]).toContain(code);
      expect(Date.now() - started).toBeLessThan(EXIT_BOUND_MS);
    } finally {
      receiver.closeAllConnections();
      receiver.close();
    }
  }, 240_000);
});

describe('a second signal', () => {
  it('ends a draining API at once', async () => {
    const kind = KINDS[1]!;
    const started = await start({ ...kind, env: () => ({ ...kind.env(), SHUTDOWN_DRAIN_DELAY_MS: '60000' }) }, 'pipe');
    started.child.stdout!.resume();
    started.child.stderr!.resume();
    started.child.kill('SIGTERM');
    // Draining: still serving, readiness 503, for a minute unless told again.
    await waitFor('readiness 503', async () => (await fetch(`${started.baseUrl}/readiness`)).status === 503);
    expect(started.child.exitCode).toBeNull();
    expect(await terminate(started)).toBe(1);
  }, 180_000);
});
