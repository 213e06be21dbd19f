import { WebSocket } from 'ws';

/** A raw WebSocket speaking JSON messages, for provoking protocol errors a real client never sends. */
export interface RawSocket {
  socket: WebSocket;
  send(message: unknown): void;
  /** The next message whose `type` matches (skipping others), or rejects after `timeoutMs`. */
  next(type?: string, timeoutMs?: number): Promise<any>;
  /** Messages received so far, in order. */
  received: any[];
  /** Resolves with the close code and reason once the socket closes. */
  closed: Promise<{ code: number; reason: string }>;
}

export async function openRawSocket(
  url: string,
  options: { protocol?: string | string[]; autoPong?: boolean } = {},
): Promise<RawSocket> {
  const socket = new WebSocket(url, options.protocol ?? 'graphql-transport-ws', {
    autoPong: options.autoPong ?? true,
  });
  const received: any[] = [];
  const waiters: Array<() => void> = [];
  socket.on('message', (data) => {
    received.push(JSON.parse(String(data)));
    for (const wake of waiters.splice(0)) wake();
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => {
    socket.once('close', (code, reason) => {
      resolve({ code, reason: String(reason) });
      for (const wake of waiters.splice(0)) wake();
    });
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('error', reject);
  });
  let cursor = 0;
  return {
    socket,
    received,
    closed,
    send: (message) => socket.send(typeof message === 'string' ? message : JSON.stringify(message)),
    async next(type, timeoutMs = 5_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        while (cursor < received.length) {
          const message = received[cursor++];
          if (!type || message.type === type) return message;
        }
        if (socket.readyState === socket.CLOSED)
          throw new Error(`socket closed while waiting for ${type ?? 'a message'}`);
        const remaining = deadline - Date.now();
        if (remaining <= 0) throw new Error(`no ${type ?? 'message'} within ${timeoutMs} ms`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, remaining);
          waiters.push(() => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
    },
  };
}

/** Opens a socket and completes `connection_init` → `connection_ack`. */
export async function openAckedSocket(url: string, payload?: Record<string, unknown>): Promise<RawSocket> {
  const raw = await openRawSocket(url);
  raw.send({ type: 'connection_init', payload });
  await raw.next('connection_ack');
  return raw;
}
