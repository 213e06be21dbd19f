/**
 * The physical limit: a tiny `ws` server speaking just enough graphql-transport-ws (connection_init →
 * connection_ack, subscribe, complete, ping/pong) and, on `POST /publish`, sending the event's `next`
 * frame to every subscribed socket. The payload is serialised once per event; each socket's frame is the
 * socket's pre-built `{"id":"<its id>","type":"next","payload":` head spliced before it (a Buffer.concat),
 * since every socket has its own subscription id. No GraphQL, no execution, no async iteration.
 *
 * `GET /stats` answers `{"subscribed": n}`. Listens on 127.0.0.1:$PORT and prints `listening <port>`.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type WebSocket, WebSocketServer } from 'ws';
import { type BenchEvent, payloadJson } from './protocol.js';

interface Subscriber {
  socket: WebSocket;
  head: Buffer;
}

const subscribers = new Map<WebSocket, Subscriber>();

/**
 * `RAW_FAULT` makes the server deliberately wrong, so the smoke test can prove the clients' checks catch
 * it: `wrong-id` (each socket gets its neighbour's frame), `wrong-title`, `drop` (every 10th socket
 * gets nothing), `duplicate` (every 10th socket gets the frame twice).
 */
const FAULT = process.env.RAW_FAULT ?? '';

function broadcast(event: BenchEvent): void {
  if (FAULT) {
    broadcastWithFault(event);
    return;
  }
  const tail = Buffer.from(`${payloadJson(event)}}`);
  for (const subscriber of subscribers.values()) {
    subscriber.socket.send(Buffer.concat([subscriber.head, tail]), { binary: false });
  }
}

function broadcastWithFault(event: BenchEvent): void {
  const tail = Buffer.from(`${payloadJson(FAULT === 'wrong-title' ? { ...event, title: `${event.title}!` } : event)}}`);
  const all = [...subscribers.values()];
  all.forEach((subscriber, i) => {
    const head = FAULT === 'wrong-id' ? all[(i + 1) % all.length]!.head : subscriber.head;
    if (FAULT === 'drop' && i % 10 === 0) return;
    subscriber.socket.send(Buffer.concat([head, tail]), { binary: false });
    if (FAULT === 'duplicate' && i % 10 === 0) subscriber.socket.send(Buffer.concat([head, tail]), { binary: false });
  });
}

const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/stats') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ subscribed: subscribers.size }));
    return;
  }
  if (req.method === 'POST' && req.url === '/publish') {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const event = JSON.parse(Buffer.concat(chunks).toString('utf8')) as BenchEvent;
      res.writeHead(204).end();
      broadcast(event);
    });
    return;
  }
  res.writeHead(404).end();
});

const wss = new WebSocketServer({
  server,
  path: '/graphql',
  perMessageDeflate: false,
  maxPayload: 1024 * 1024,
  handleProtocols: (protocols) => (protocols.has('graphql-transport-ws') ? 'graphql-transport-ws' : false),
});

wss.on('connection', (socket) => {
  socket.on('message', (data: Buffer) => {
    let message: { type?: string; id?: string };
    try {
      message = JSON.parse(data.toString('utf8'));
    } catch {
      socket.close(4400, 'Invalid message received');
      return;
    }
    switch (message.type) {
      case 'connection_init':
        socket.send('{"type":"connection_ack"}');
        break;
      case 'subscribe':
        subscribers.set(socket, {
          socket,
          head: Buffer.from(`{"id":${JSON.stringify(message.id)},"type":"next","payload":`),
        });
        break;
      case 'complete':
        subscribers.delete(socket);
        break;
      case 'ping':
        socket.send('{"type":"pong"}');
        break;
    }
  });
  socket.on('close', () => subscribers.delete(socket));
});

server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(`listening ${(server.address() as AddressInfo).port}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    for (const socket of wss.clients) socket.terminate();
    server.close(() => process.exit(0));
    setTimeout(() => process.exit(0), 2_000).unref();
  });
}
