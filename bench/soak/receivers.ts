import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { verifyWebhook } from '@herald/webhooks';

/** How a local webhook receiver answers. */
export type ReceiverBehaviour = 'fast' | 'slow' | 'flaky' | 'throttling' | 'gone' | 'silent' | 'away' | 'fifo';

/** A receiver that keeps a request unanswered (silent) drops it after this long, to bound its sockets. */
const SILENT_HOLD_MS = 60_000;
/** The slow receiver's answer delay: under the dispatcher's timeout. */
const SLOW_MS = 1_500;

/** One verified event at a receiver: the first arrival and how many copies came. */
export interface Arrival {
  eventId: string;
  postId: string;
  firstAt: number;
  copies: number;
}

export interface Receiver {
  name: string;
  behaviour: ReceiverBehaviour;
  port: number;
  url: string;
  /** Set once the endpoint exists: the signing secret every body is verified with. */
  secret: string | undefined;
  arrivals: Map<string, Arrival>;
  requests: number;
  invalid: number;
  invalidSamples: string[];
  /** Closes the listener and every open connection (the receiver went away); {@link comeBack} reopens. */
  goAway(): Promise<void>;
  comeBack(): Promise<void>;
  close(): Promise<void>;
}

/**
 * A receiver on 127.0.0.1 that verifies every request it gets (signature with the endpoint's secret, the
 * id header against the body) before it answers as its behaviour says: fast 204; slow after 1.5 s; flaky
 * 500 for every other request; throttling 429 with `Retry-After: 1` for every third; gone 410; silent
 * never answers; away answers 204 while it is there; fifo (an ordered endpoint's) 500 for every tenth, so
 * its line is held by a failing head now and then.
 */
export async function startReceiver(name: string, behaviour: ReceiverBehaviour): Promise<Receiver> {
  const sockets = new Set<Socket>();
  let count = 0;
  let server: Server | undefined;
  let port = 0;
  const receiver: Receiver = {
    name,
    behaviour,
    port: 0,
    url: '',
    secret: undefined,
    arrivals: new Map(),
    requests: 0,
    invalid: 0,
    invalidSamples: [],
    goAway: async () => {
      const closing = server;
      server = undefined;
      if (!closing) return;
      const closed = new Promise<void>((resolve) => closing.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
    comeBack: async () => {
      if (!server) server = await listen(port);
    },
    close: () => receiver.goAway(),
  };

  const handle = (request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      receiver.requests++;
      record(receiver, Buffer.concat(chunks), request.headers);
      count++;
      switch (behaviour) {
        case 'slow':
          setTimeout(() => response.writeHead(204).end(), SLOW_MS).unref();
          return;
        case 'flaky':
          response.writeHead(count % 2 === 0 ? 500 : 204).end();
          return;
        case 'throttling':
          if (count % 3 === 0) response.writeHead(429, { 'retry-after': '1' }).end();
          else response.writeHead(204).end();
          return;
        case 'fifo':
          response.writeHead(count % 10 === 0 ? 500 : 204).end();
          return;
        case 'gone':
          response.writeHead(410).end();
          return;
        case 'silent':
          setTimeout(() => response.destroy(), SILENT_HOLD_MS).unref();
          return;
        default:
          response.writeHead(204).end();
      }
    });
  };

  const listen = (wanted: number) =>
    new Promise<Server>((resolve, reject) => {
      const created = createServer(handle);
      created.keepAliveTimeout = 5_000;
      created.on('connection', (socket) => {
        sockets.add(socket);
        socket.once('close', () => sockets.delete(socket));
      });
      created.once('error', reject);
      created.listen(wanted, '127.0.0.1', () => resolve(created));
    });

  server = await listen(0);
  port = (server.address() as { port: number }).port;
  receiver.port = port;
  receiver.url = `http://127.0.0.1:${port}/${name}`;
  return receiver;
}

/** Verifies one body; a verified event counts once per id, later copies as duplicates. */
function record(receiver: Receiver, body: Buffer, headers: IncomingMessage['headers']): void {
  const fail = (reason: string) => {
    receiver.invalid++;
    if (receiver.invalidSamples.length < 5) receiver.invalidSamples.push(reason);
  };
  if (!receiver.secret) {
    fail('a request before the endpoint existed');
    return;
  }
  try {
    const event = verifyWebhook({ rawBody: body, headers, secrets: [receiver.secret] });
    const postId = (event.data as { id?: unknown } | undefined)?.id;
    if (typeof postId !== 'string') {
      fail(`event ${event.id} without data.id`);
      return;
    }
    const seen = receiver.arrivals.get(event.id);
    if (seen) {
      seen.copies++;
      if (seen.postId !== postId) fail(`event ${event.id} came with two posts: ${seen.postId}, ${postId}`);
    } else {
      receiver.arrivals.set(event.id, { eventId: event.id, postId, firstAt: Date.now(), copies: 1 });
    }
  } catch (error) {
    fail((error as Error).message);
  }
}
