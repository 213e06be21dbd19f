import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { waitFor } from '@herald/testing/ports';
import { buildSchema, GraphQLError } from 'graphql';
import type { ServerOptions } from 'graphql-ws';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { createLogger } from '../logger.js';
import { openRawSocket } from '../testing/raw-socket.js';
import { type ConnectionExtra, type GraphQLWsAdapter, HeraldSocket, serveGraphQLWs } from './graphql-ws-adapter.js';

// The adapter alone, on a bare schema (no database): the parts of graphql-ws's useServer it replaces.

const schema = buildSchema('type Query { hello: String }');
let running: { http: Server; adapter: GraphQLWsAdapter } | undefined;

async function start(
  options: Partial<ServerOptions<Record<string, unknown>, ConnectionExtra>>,
  keepAliveMs: number,
): Promise<string> {
  const http = createServer();
  const wss = new WebSocketServer({ server: http, WebSocket: HeraldSocket });
  const adapter = serveGraphQLWs({ schema, ...options }, wss, { keepAliveMs, logger: createLogger('silent') });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  running = { http, adapter };
  return `ws://127.0.0.1:${(http.address() as AddressInfo).port}`;
}

afterEach(async () => {
  if (!running) return;
  await running.adapter.dispose();
  await new Promise((resolve) => running?.http.close(resolve));
  running = undefined;
});

describe('graphql-ws adapter', () => {
  it('closes with 4408 when connection_init does not come within connectionInitWaitTimeout', async () => {
    const url = await start({ connectionInitWaitTimeout: 150 }, 0);
    const raw = await openRawSocket(url);
    expect(await raw.closed).toEqual({ code: 4408, reason: 'Connection initialisation timeout' });
  });

  it('keeps a socket whose connection_init came in time, and runs operations on it', async () => {
    const url = await start({ connectionInitWaitTimeout: 150, roots: { query: { hello: 'world' } } }, 0);
    const raw = await openRawSocket(url);
    raw.send({ type: 'connection_init' });
    await raw.next('connection_ack');
    await new Promise((resolve) => setTimeout(resolve, 300));
    raw.send({ id: '1', type: 'subscribe', payload: { query: '{ hello }' } });
    expect((await raw.next('next')).payload).toEqual({ data: { hello: 'world' } });
    expect((await raw.next('complete')).id).toBe('1');
    expect(raw.socket.readyState).toBe(WebSocket.OPEN);
    raw.socket.close();
  });

  it('pings every socket each keep-alive interval, drops one that stops answering and keeps one that answers', async () => {
    const url = await start({}, 100);
    const healthy = await openRawSocket(url);
    const silent = await openRawSocket(url, { autoPong: false });
    let healthyPings = 0;
    let silentPings = 0;
    healthy.socket.on('ping', () => healthyPings++);
    silent.socket.on('ping', () => silentPings++);
    // Dropped one interval after its first unanswered ping (terminated: no close frame, 1006).
    expect((await silent.closed).code).toBe(1006);
    expect(silentPings).toBeLessThanOrEqual(1);
    await new Promise((resolve) => setTimeout(resolve, 450));
    // Pings come on the server's timer: a busy host may have sent fewer by now (a drop ends the wait too).
    await waitFor(
      'three pings to the healthy socket',
      () => healthyPings >= 3 || healthy.socket.readyState !== WebSocket.OPEN,
      { timeoutMs: 30_000, intervalMs: 20 },
    );
    expect(healthy.socket.readyState).toBe(WebSocket.OPEN);
    expect(healthyPings).toBeGreaterThanOrEqual(3);
    healthy.socket.close();
  });

  it('closes with 4500 when handling a message throws (a server bug, not bad input)', async () => {
    const url = await start(
      {
        onSubscribe() {
          throw new Error('boom');
        },
      },
      0,
    );
    const raw = await openRawSocket(url);
    raw.send({ type: 'connection_init' });
    await raw.next('connection_ack');
    raw.send({ id: '1', type: 'subscribe', payload: { query: '{ hello }' } });
    expect(await raw.closed).toEqual({ code: 4500, reason: 'Internal server error' });
  });

  it('hands errors returned by onSubscribe to the client as an error message, socket kept', async () => {
    const url = await start({ onSubscribe: () => [new GraphQLError('no')] }, 0);
    const raw = await openRawSocket(url);
    raw.send({ type: 'connection_init' });
    await raw.next('connection_ack');
    raw.send({ id: '1', type: 'subscribe', payload: { query: '{ hello }' } });
    expect((await raw.next('error')).payload[0].message).toBe('no');
    expect(raw.socket.readyState).toBe(WebSocket.OPEN);
    raw.socket.close();
  });

  it('tells onClose about every socket once, with its state', async () => {
    const closed: ConnectionExtra[] = [];
    const http = createServer();
    const wss = new WebSocketServer({ server: http, WebSocket: HeraldSocket });
    const adapter = serveGraphQLWs({ schema }, wss, {
      keepAliveMs: 0,
      logger: createLogger('silent'),
      onClose: (extra) => closed.push(extra),
    });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    running = { http, adapter };
    const raw = await openRawSocket(`ws://127.0.0.1:${(http.address() as AddressInfo).port}`);
    raw.socket.close();
    await raw.closed;
    const deadline = Date.now() + 2_000;
    while (closed.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(closed).toHaveLength(1);
    expect(closed[0]?.socket).toBeInstanceOf(HeraldSocket);
  });
});
