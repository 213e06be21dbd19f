import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { freePorts } from '@herald/testing/ports';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postJson } from './subscribers.js';

// The publish helper of the cross-app tests: each request on a connection of its own, so a pod that closes an
// idle keep-alive connection can never take a request down with it.

let server: Server;
let origin: string;
const connections: number[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (chunk: string) => {
      body += chunk;
    });
    req.on('end', () => {
      if (req.url === '/not-json') {
        res.writeHead(502).end('<html>bad gateway</html>');
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ echoed: JSON.parse(body) }));
    });
  });
  server.on('connection', () => connections.push(Date.now()));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

describe('postJson', () => {
  it('opens a connection of its own for every request, even beside an idle keep-alive one', async () => {
    // A plain fetch leaves an idle keep-alive socket in the process-wide pool (as the tests' /metrics reads do).
    await (await fetch(`${origin}/warm`, { method: 'POST', body: '{}' })).text();
    const before = connections.length;
    expect(await postJson(`${origin}/graphql`, {}, JSON.stringify({ n: 1 }))).toEqual({ echoed: { n: 1 } });
    expect(await postJson(`${origin}/graphql`, {}, JSON.stringify({ n: 2 }))).toEqual({ echoed: { n: 2 } });
    expect(connections.length - before).toBe(2);
  });

  it('rejects an answer that is not JSON with its status', async () => {
    await expect(postJson(`${origin}/not-json`, {}, '{}')).rejects.toThrow(/HTTP 502 with a body that is not JSON/);
  });

  it('rejects a refused connection with the socket error as cause, as fetch does', async () => {
    const [port] = await freePorts(1);
    const error = await postJson(`http://127.0.0.1:${port}/graphql`, {}, '{}').catch((caught: unknown) => caught);
    expect((error as { cause?: { code?: string } }).cause?.code).toBe('ECONNREFUSED');
  });
});
