import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDeliverer, type Deliverer } from './deliver.js';
import { startTestReceiver, type TestReceiver } from './testing/test-receiver.js';

let receiver: TestReceiver;
let deliverer: Deliverer;
const request = (path: string, endpointId = 'we_test') => ({
  endpointId,
  url: receiver.url(path),
  body: '{"id":"evt_1"}',
  headers: { 'Content-Type': 'application/json', 'X-Webhook-ID': 'evt_1' },
});

beforeAll(async () => {
  receiver = await startTestReceiver();
  deliverer = createDeliverer({ timeoutMs: 300, policy: { allowPrivateUrls: true } });
  // A first POST opens the connection and compiles the path: on a loaded machine that alone can pass
  // the 300 ms the timeout tests below rely on, so it is made here, until one is answered.
  for (let tries = 0; tries < 10; tries++) {
    if ((await deliverer.deliver(request('/warm-up'))).ok) break;
  }
});

afterAll(async () => {
  await deliverer.close();
  await receiver.close();
});

describe('deliver', () => {
  it('reports a request undici refuses to start (here: a pool it cannot make) as a failed outcome, never a rejection', async () => {
    const broken = createDeliverer({ timeoutMs: 300, policy: { allowPrivateUrls: true }, connectionsPerEndpoint: -1 });
    try {
      const outcome = await broken.deliver(request('/ok', 'we_broken'));
      expect(outcome).toMatchObject({ ok: false, statusCode: null });
      expect(outcome.error).toMatch(/connections/i);
    } finally {
      await broken.close();
    }
  });

  it('POSTs the body and headers once and reports a 2xx as ok', async () => {
    const outcome = await deliverer.deliver(request('/ok'));
    expect(outcome).toMatchObject({ ok: true, statusCode: 200, error: null });
    expect(outcome.durationMs).toBeGreaterThanOrEqual(0);
    const [received] = receiver.requestsTo('/ok');
    expect(received).toMatchObject({ body: '{"id":"evt_1"}' });
    expect(received!.headers['x-webhook-id']).toBe('evt_1');
    expect(received!.headers['user-agent']).toMatch(/^Herald-Webhooks/);
  });

  it('sends one User-Agent, Herald’s, even when the caller’s headers name one', async () => {
    const outcome = await deliverer.deliver({
      ...request('/agent'),
      headers: { ...request('/agent').headers, 'user-agent': 'Caller/1.0' },
    });
    expect(outcome.ok).toBe(true);
    const [received] = receiver.requestsTo('/agent');
    const agents = received!.rawHeaders.filter(
      (_, i, all) => i % 2 === 1 && all[i - 1]!.toLowerCase() === 'user-agent',
    );
    expect(agents).toHaveLength(1);
    expect(agents[0]).toMatch(/^Herald-Webhooks/);
  });

  it('never follows a redirect', async () => {
    receiver.behave(() => ({ status: 302, headers: { location: receiver.url('/elsewhere') } }), '/moved');
    expect(await deliverer.deliver(request('/moved'))).toMatchObject({ ok: false, statusCode: 302 });
    expect(receiver.requestsTo('/elsewhere')).toEqual([]);
  });

  it('passes Retry-After on', async () => {
    receiver.behave(() => ({ status: 503, headers: { 'retry-after': '7' } }), '/busy');
    expect(await deliverer.deliver(request('/busy'))).toMatchObject({
      ok: false,
      statusCode: 503,
      error: 'HTTP 503',
      retryAfter: '7',
    });
  });

  it('turns a timeout and a cut connection into outcomes, never exceptions', async () => {
    receiver.behave(() => 'hang', '/hang');
    expect(await deliverer.deliver(request('/hang'))).toMatchObject({
      ok: false,
      statusCode: null,
      error: 'timed out after 300 ms',
    });
    receiver.behave(() => 'destroy', '/cut');
    const cut = await deliverer.deliver(request('/cut'));
    expect(cut).toMatchObject({ ok: false, statusCode: null });
    expect(cut.error).toBeTruthy();
  });

  it('times out each of several staggered attempts on its own deadline, and answers the others', async () => {
    receiver.behave(() => 'hang', '/hang-many');
    const started = performance.now();
    const hanging = [0, 100, 200].map(async (delayMs) => {
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      const outcome = await deliverer.deliver(request('/hang-many', `we_hang_${delayMs}`));
      return { delayMs, outcome, endedAt: performance.now() - started };
    });
    // An answered attempt in between is not held back by the others' deadlines.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await deliverer.deliver(request('/ok-between'))).toMatchObject({ ok: true, statusCode: 200 });
    for (const { delayMs, outcome, endedAt } of await Promise.all(hanging)) {
      expect(outcome).toMatchObject({ ok: false, statusCode: null, error: 'timed out after 300 ms' });
      // Its own deadline (start + 300 ms), not the first attempt's, and not much later either.
      expect(endedAt).toBeGreaterThanOrEqual(delayMs + 290);
      expect(endedAt).toBeLessThan(delayMs + 300 + 1_000);
    }
  });

  it('follows an endpoint whose URL moved to another origin', async () => {
    const other = await startTestReceiver();
    try {
      expect(await deliverer.deliver(request('/before-move', 'we_moving'))).toMatchObject({ ok: true });
      const moved = { ...request('/after-move', 'we_moving'), url: other.url('/after-move') };
      expect(await deliverer.deliver(moved)).toMatchObject({ ok: true });
      expect(other.requestsTo('/after-move')).toHaveLength(1);
      expect(receiver.requestsTo('/after-move')).toEqual([]);
    } finally {
      await other.close();
    }
  });

  it('refuses a private address without connecting when private URLs are not allowed', async () => {
    const strict = createDeliverer({ timeoutMs: 300, policy: { allowPrivateUrls: false } });
    try {
      const before = receiver.requests.length;
      expect((await strict.deliver(request('/private'))).error).toMatch(/^refused: .*loopback/);
      expect(receiver.requests.length).toBe(before);
    } finally {
      await strict.close();
    }
  });

  it('keeps the first KiB of an answer, stops reading a large one, and skips informational answers', async () => {
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.url === '/large') {
          res.writeHead(200, { 'content-type': 'text/plain' });
          // 200 KiB, in chunks: more than is ever read.
          for (let i = 0; i < 200; i++) res.write(`${String(i).padStart(4, '0')}${'x'.repeat(1_020)}`);
          res.end();
        } else if (req.url === '/hinted') {
          res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' });
          res.writeHead(503, { 'retry-after': '9' }).end('busy\u0000 now');
        } else {
          res.writeHead(204).end();
        }
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const large = await deliverer.deliver({ ...request('/'), endpointId: 'we_body', url: `${base}/large` });
      expect(large).toMatchObject({ ok: true, statusCode: 200, error: null, retryAfter: null });
      expect(large.responseBody).toBe(`0000${'x'.repeat(1_020)}`);
      // The 103 is not the answer; the 503 is, with its Retry-After and body (NUL removed).
      expect(await deliverer.deliver({ ...request('/'), endpointId: 'we_body', url: `${base}/hinted` })).toMatchObject({
        ok: false,
        statusCode: 503,
        error: 'HTTP 503',
        retryAfter: '9',
        responseBody: 'busy now',
      });
      // The endpoint's pool still delivers after a connection was cut mid-answer.
      expect(await deliverer.deliver({ ...request('/'), endpointId: 'we_body', url: `${base}/empty` })).toMatchObject({
        ok: true,
        statusCode: 204,
        responseBody: null,
      });
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('reads an answer that arrived while this process was stalled past the deadline, instead of calling it a timeout', async () => {
    // The receiver runs in its own process, so it answers while this one is busy: it says `got` on
    // stdout when a request has arrived and answers 200 50 ms later.
    const child = spawn(
      process.execPath,
      [
        '-e',
        `const server = require('node:http').createServer((req, res) => {
          req.resume();
          req.on('end', () => {
            process.stdout.write('got\\n');
            setTimeout(() => res.writeHead(200, { 'content-length': '0' }).end(), 50);
          });
        });
        server.listen(0, '127.0.0.1', () => process.stdout.write('port ' + server.address().port + '\\n'));`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const stalled = createDeliverer({ timeoutMs: 300, policy: { allowPrivateUrls: true } });
    try {
      child.stdout.setEncoding('utf8');
      const [first] = (await once(child.stdout, 'data')) as [string];
      const port = Number(/port (\d+)/.exec(first)?.[1]);
      const post = { ...request('/stalled'), url: `http://127.0.0.1:${port}/stalled` };
      // A first delivery opens the connection (and loads the HTTP parser).
      const warm = stalled.deliver(post);
      await once(child.stdout, 'data');
      expect(await warm).toMatchObject({ ok: true, statusCode: 200 });

      const pending = stalled.deliver(post);
      await once(child.stdout, 'data');
      // The request has arrived; this process now stalls past the 300 ms deadline while the answer
      // comes in (as under CPU starvation or a long GC pause).
      const until = performance.now() + 600;
      while (performance.now() < until) {
        // busy
      }
      // The receiver answered 200: the delivery is done, not a timeout to be retried (POSTed twice).
      expect(await pending).toMatchObject({ ok: true, statusCode: 200, error: null });
    } finally {
      await stalled.close();
      child.kill();
    }
  });
});

describe('the parsed-URL cache', () => {
  it('parses a URL once while it is cached, and keeps the last 1,000 URLs used, no more', async () => {
    // A private IP-literal host is checked against the policy each time its URL is parsed, so a policy
    // that counts its reads counts the parses (refused URLs are cached too, and never connect anywhere).
    let parses = 0;
    const policy = {
      get allowPrivateUrls() {
        parses++;
        return false;
      },
    };
    const cached = createDeliverer({ timeoutMs: 300, policy });
    const url = (n: number) => `http://10.1.${Math.floor(n / 256)}.${n % 256}/hook`;
    const deliver = async (n: number) => {
      const outcome = await cached.deliver({ endpointId: `we_cache_${n}`, url: url(n), body: '{}', headers: {} });
      expect(outcome.error).toMatch(/^refused: .*private/);
    };
    try {
      await deliver(0);
      const perParse = parses;
      // Guards the count itself: were the policy no longer read per parse, this test would prove nothing.
      expect(perParse).toBeGreaterThan(0);
      // Used: the same URL again is not parsed again.
      await deliver(0);
      await deliver(0);
      expect(parses).toBe(perParse);

      // Bounded (deliver.ts's MAX_CACHED_URLS, 1,000): 1,000 more URLs push URL 0, the least recently used, out…
      for (let n = 1; n <= 1_000; n++) await deliver(n);
      expect(parses).toBe(1_001 * perParse);
      // …and those 1,000 are all still there…
      for (let n = 1; n <= 1_000; n++) await deliver(n);
      expect(parses).toBe(1_001 * perParse);
      // …while URL 0 is parsed again.
      await deliver(0);
      expect(parses).toBe(1_002 * perParse);
    } finally {
      await cached.close();
    }
  });
});
