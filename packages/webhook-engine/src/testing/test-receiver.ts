import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request a test receiver got. */
export interface ReceivedRequest {
  path: string;
  headers: Record<string, string>;
  /** The headers as sent, name and value in turn, repeats included (`IncomingMessage.rawHeaders`). */
  rawHeaders: string[];
  body: string;
  /** `Date.now()` when the body had arrived. */
  receivedAt: number;
}

/**
 * How to answer: a status (with headers), `hang` (never answer: the sender times out) or `destroy`
 * (cut the connection without an answer).
 */
export type ReceiverAnswer =
  | { status: number; headers?: Record<string, string>; delayMs?: number }
  | 'hang'
  | 'destroy';

/** Decides the answer to a request; `nth` counts requests to the same path, from 1. */
export type ReceiverBehaviour = (request: ReceivedRequest, nth: number) => ReceiverAnswer;

export interface TestReceiver {
  /** `http://127.0.0.1:<port><path>`. */
  url(path?: string): string;
  /** Every request so far, in arrival order. */
  readonly requests: ReceivedRequest[];
  /** Requests to one path. */
  requestsTo(path: string): ReceivedRequest[];
  /** Changes how requests to `path` (or, without a path, every other request) are answered. */
  behave(behaviour: ReceiverBehaviour, path?: string): void;
  /** Resolves once `predicate` holds for the requests so far; rejects after `timeoutMs`. */
  waitFor(predicate: (requests: ReceivedRequest[]) => boolean, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/** A real HTTP receiver on 127.0.0.1 for tests and benchmarks; answers 200 unless told otherwise. */
export async function startTestReceiver(behaviour: ReceiverBehaviour = () => ({ status: 200 })): Promise<TestReceiver> {
  const requests: ReceivedRequest[] = [];
  const counts = new Map<string, number>();
  const byPath = new Map<string, ReceiverBehaviour>();
  let fallback = behaviour;
  let waiters: Array<() => void> = [];
  const hanging = new Set<ServerResponse>();

  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const path = req.url ?? '/';
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : value;
    }
    const received: ReceivedRequest = {
      path,
      headers,
      rawHeaders: req.rawHeaders,
      body: Buffer.concat(chunks).toString('utf8'),
      receivedAt: Date.now(),
    };
    const nth = (counts.get(path) ?? 0) + 1;
    counts.set(path, nth);
    requests.push(received);
    const answer = (byPath.get(path) ?? fallback)(received, nth);
    for (const wake of waiters) wake();
    if (answer === 'hang') {
      hanging.add(res);
      res.on('close', () => hanging.delete(res));
      return;
    }
    if (answer === 'destroy') {
      req.socket.destroy();
      return;
    }
    if (answer.delayMs) await new Promise((resolve) => setTimeout(resolve, answer.delayMs));
    res.writeHead(answer.status, answer.headers);
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: (path = '/') => `http://127.0.0.1:${port}${path}`,
    requests,
    requestsTo: (path) => requests.filter((request) => request.path === path),
    behave(next, path) {
      if (path === undefined) fallback = next;
      else byPath.set(path, next);
    },
    waitFor(predicate, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!predicate(requests)) return;
          clearTimeout(timer);
          waiters = waiters.filter((waiter) => waiter !== check);
          resolve();
        };
        const timer = setTimeout(() => {
          waiters = waiters.filter((waiter) => waiter !== check);
          reject(new Error(`test receiver: condition not met within ${timeoutMs} ms (${requests.length} requests)`));
        }, timeoutMs);
        waiters.push(check);
        check();
      });
    },
    close() {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
